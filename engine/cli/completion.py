"""`swjob completion bash|zsh`: a shell completion script, made from the parser itself, so
a new command or flag completes without anyone editing a script. It completes commands,
each command's flags, a run id where a command takes one (from `swjob runs`), and files
elsewhere. zsh runs the same function through its bash compatibility layer."""

from __future__ import annotations

import argparse

RUN_TAKERS = ("logs", "attach", "stop", "shell", "forward")

_BASH = """\
# swjob completion for bash (made by `swjob completion bash`)
_swjob() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" command="${{COMP_WORDS[1]}}"
    if [ "$COMP_CWORD" -eq 1 ]; then
        COMPREPLY=($(compgen -W "{commands} --help --version" -- "$cur"))
        return
    fi
    case "$command" in
{cases}
    esac
    if [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "$flags" -- "$cur"))
    elif [ "$COMP_CWORD" -eq 2 ] && [[ " {run_takers} " == *" $command "* ]]; then
        COMPREPLY=($(compgen -W "$(swjob runs --limit 50 2>/dev/null | cut -f1)" -- "$cur"))
    else
        COMPREPLY=($(compgen -f -- "$cur"))
    fi
}}
complete -o filenames -F _swjob swjob
"""

_ZSH = """\
# swjob completion for zsh (made by `swjob completion zsh`): the bash function, run by
# zsh's bash compatibility layer
autoload -U +X bashcompinit && bashcompinit
"""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    commands = _subcommands(parser)
    cases = "\n".join(
        f'        {name}) local flags="{" ".join(_flags(sub))}" ;;'
        for name, sub in commands.items()
    )
    bash = _BASH.format(commands=" ".join(commands), cases=cases, run_takers=" ".join(RUN_TAKERS))
    return bash if shell == "bash" else _ZSH + bash


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    return [flag for action in parser._actions for flag in action.option_strings]
