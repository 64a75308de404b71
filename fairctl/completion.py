"""``fairctl --show-completion`` and ``fairctl --install-completion``: tab completion for bash, zsh
and fish, the shell told by $SHELL. The script is click's (it runs fairctl with
``_FAIRCTL_COMPLETE`` set); installing it puts it where each shell loads it from, as the CLI
did before it moved to plain click.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from .commands import F

# shell: (the script's file under $HOME, the startup file that loads it, the line it needs there)
INSTALL = {
    "bash": (".bash_completions/{prog}.sh", ".bashrc", "source '{path}'"),
    "zsh": (".zfunc/_{prog}", ".zshrc", "fpath+=~/.zfunc; autoload -Uz compinit; compinit"),
    "fish": (".config/fish/completions/{prog}.fish", None, None),
}


def _shell() -> str:
    shell = Path(os.environ.get("SHELL", "")).name
    if shell not in INSTALL:
        raise click.UsageError(f"cannot tell a shell with completion from SHELL={shell or '(unset)'}: "
                               f"completion exists for {', '.join(INSTALL)}")
    return shell


def _script(ctx: click.Context, shell: str) -> tuple[str, str]:
    from click.shell_completion import get_completion_class

    root = ctx.find_root()
    prog = root.info_name or "fairctl"
    complete = get_completion_class(shell)
    assert complete is not None
    variable = f"_{prog.replace('-', '_').replace(' ', '_').upper()}_COMPLETE"
    return prog, complete(root.command, {}, prog, variable).source()


def _show(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    click.echo(_script(ctx, _shell())[1])
    ctx.exit()


def _install(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    shell = _shell()
    prog, script = _script(ctx, shell)
    where, startup, line = INSTALL[shell]
    path = Path.home() / where.format(prog=prog)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script + "\n", encoding="utf-8")
    if startup is not None and line is not None:
        rc = Path.home() / startup
        text = rc.read_text(encoding="utf-8") if rc.is_file() else ""
        entry = line.format(path=path)
        if entry not in text:
            rc.write_text(f"{text.rstrip()}\n{entry}\n".lstrip(), encoding="utf-8")
    click.echo(f"{shell} completion installed in {path}\nCompletion will take effect once you restart the terminal")
    ctx.exit()


def options(f: F) -> F:
    """The root's two completion options."""
    f = click.option("--show-completion", is_flag=True, expose_value=False, is_eager=True, callback=_show,
                     help="Show completion for the current shell, to copy it or customize the installation.")(f)
    return click.option("--install-completion", is_flag=True, expose_value=False, is_eager=True, callback=_install,
                        help="Install completion for the current shell.")(f)
