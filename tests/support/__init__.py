"""What the tests share: fakes, servers, process helpers, paths.

Import them from here, never from another test module."""
