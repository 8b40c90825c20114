"""Shell completion scripts, generated from the argument parser so they never go stale."""

from __future__ import annotations

import argparse


def _commands(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sorted(o for a in sub._actions for o in a.option_strings)
    return found


def bash(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    cases = "\n".join(f"    {name}) opts=\"{' '.join(opts)}\" ;;"
                      for name, opts in sorted(commands.items()))
    return f"""# cargoship bash completion: eval "$(cargoship completion bash)"
_cargoship() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} cmd=${{COMP_WORDS[1]}} opts
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "{' '.join(sorted(commands))} --help --version -v --no-color" \\
      -- "$cur"))
    return
  fi
  case "$cmd" in
{cases}
    *) opts="" ;;
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -F _cargoship cargoship
"""
