"""Split a command's arguments into its own options and ``--id value`` overrides."""

from __future__ import annotations

import argparse


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0 and not isinstance(
        action, argparse._StoreConstAction | argparse._CountAction | argparse._HelpAction | argparse._VersionAction
    )


def split_overrides(parser: argparse.ArgumentParser, tokens: list[str]) -> tuple[list[str], list[str]]:
    """Return ``(tokens for argparse, override tokens)``.

    An option the parser knows keeps its value; any other ``--key`` takes the next token as its
    value whatever it looks like (so ``--x -1`` and ``--lr 1e-3`` work). Everything after a bare
    ``--`` is an override.
    """
    known: list[str] = []
    overrides: list[str] = []
    actions = parser._option_string_actions
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            overrides.extend(tokens[i + 1 :])
            break
        if tok.startswith("-") and len(tok) > 1 and not _is_number(tok):
            name = tok.split("=", 1)[0]
            action = actions.get(name)
            if action is None:
                if tok.startswith("--"):
                    overrides.append(tok)
                    if "=" not in tok and i + 1 < len(tokens):
                        overrides.append(tokens[i + 1])
                        i += 1
                else:
                    known.append(tok)  # let argparse report an unknown short option
                i += 1
                continue
            known.append(tok)
            if "=" not in tok and _takes_value(action):
                if action.nargs in ("+", "*"):
                    while i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                        known.append(tokens[i + 1])
                        i += 1
                elif i + 1 < len(tokens):
                    known.append(tokens[i + 1])
                    i += 1
            i += 1
            continue
        known.append(tok)
        i += 1
    return known, overrides


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True
