"""``python -m fairctl``: the same CLI as the ``fairctl`` console script."""

from fairctl.cli import main

main()
