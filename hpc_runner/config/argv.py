"""Split a command's arguments into its own options and ``--id value`` overrides (the CLI, and MONAI commands' jobs)."""

from __future__ import annotations

import argparse
import difflib

from hpc_runner.errors import UserError


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
                    if "=" not in tok and i + 1 < len(tokens) and tokens[i + 1].split("=", 1)[0] in actions:
                        raise _valueless(parser, tok, tokens[i + 1], actions)
                    if "=" not in tok and i + 1 == len(tokens) and near_option(parser, tok) is None:
                        raise UserError(  # `run ... --dryrun`: run has no such option, and an override needs a value
                            f"{tok} is not an option of {parser.prog}, and as a config override it lacks its value; "
                            "nothing was run or queued",
                            expected=f"an option of {parser.prog} (see --help), or an override {tok} VALUE")
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


def _spelling(option: str) -> str:
    """An option or override key as the user may have meant it: no dashes, no ``+``, ``_`` as ``-``."""
    return option.split("=", 1)[0].lstrip("-").lstrip("+").replace("_", "-").lower()


def near_option(parser: argparse.ArgumentParser, key: str) -> str | None:
    """Return the command's long option that ``key`` (``--clsuter``) looks like a typo of, else None."""
    if "::" in key or "#" in key:
        return None  # a nested id is never an option
    # each option once, as --help spells it first (--dry-run, not its alias --dry_run)
    options: dict[str, str] = {}
    for action in parser._actions:
        long = [o for o in action.option_strings if o.startswith("--")]
        for o in long:
            options.setdefault(_spelling(o), long[0])
    spelled = _spelling(key)
    if spelled in options:
        return options[spelled]  # --dry_run for --dry-run
    close = difflib.get_close_matches(spelled, list(options), n=1, cutoff=0.8)
    return options[close[0]] if close else None


def _edits(a: str, b: str) -> int:
    """Levenshtein distance, with a swap of two neighbours counted as one edit (``clsuter``)."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cost = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb))
            if i > 1 and j > 1 and ca == b[j - 2] and a[i - 2] == cb:
                cost = min(cost, prev2[j - 2] + 1)
            cur.append(cost)
        prev2, prev = prev, cur
    return prev[-1]


def clearly_a_typo(key: str, option: str) -> bool:
    """True when ``--key`` can only be a mistyped ``option`` (``--dryrun``, ``--clsuter``: at most two edits), so it
    is refused before any config is read; a longer difference (``--tracking_uri`` beside ``--tracking``) may be an
    id of the bundle, which only its config can say. Nor is the option with a word added (``--hold_s`` beside
    ``--hold``): that is another name, which only the config can say is not one of its ids."""
    spelled, meant = _spelling("--" + key), _spelling(option)
    if spelled.startswith(meant + "-"):
        return False
    return _edits(spelled, meant) <= 2


def option_typos(parser: argparse.ArgumentParser, override_tokens: list[str]) -> dict[str, str]:
    """Return ``{id: option}`` for the override keys that look like typos of the command's own options."""
    found = {}
    for tok in override_tokens:
        if tok.startswith("--") and not tok.startswith("--+"):
            option = near_option(parser, tok)
            if option:
                found[tok[2:].split("=", 1)[0].replace("#", "::")] = option
    return found


def _valueless(parser: argparse.ArgumentParser, tok: str, following: str, actions: dict) -> UserError:
    """The error for ``--dryrun --no-preflight``: an unknown key would take the command's next option as value."""
    option = near_option(parser, tok)
    meant = f" (did you mean {option}?)" if option else ""
    return UserError(
        f"{tok} is not an option of {parser.prog}{meant}. As a config override it would take the next word, "
        f"{following}, which is an option of {parser.prog}, as its value; nothing was run or queued",
        expected=f"an option of {parser.prog} (see --help), or an override --ID VALUE",
    )


def _is_number(tok: str) -> bool:
    try:
        float(tok)
    except ValueError:
        return False
    return True
