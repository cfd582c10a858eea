from .helpers import cache  # noqa: F401  (the fixture)
