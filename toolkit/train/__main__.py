"""``python -m toolkit.train``: see :mod:`toolkit.train.cli`."""

from toolkit.train.cli import main

if __name__ == "__main__":
    main()
