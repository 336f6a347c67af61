# Copyright (c) MONAI Consortium
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#     http://www.apache.org/licenses/LICENSE-2.0
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
"""The runnable components of MONAI's tests/integration/test_integration_bundle_run.py (copied into each
scenario's working folder, which is on sys.path for `python -m monai.bundle` and `python -m hpc_runner`)."""


class Runnable42:
    """A component whose run() checks the value the config gave it."""

    def __init__(self, val=1):
        self.val = val

    def run(self):
        assert self.val == 42  # defined in the scenario's config
        print("Runnable42 ran with", self.val)
        return self.val


class Runnable43:
    """A component that calls a function of the bundle's scripts/ package."""

    def __init__(self, func):
        self.func = func

    def run(self):
        self.func()
