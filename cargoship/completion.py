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


def _choices(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Commands whose argument is one of a few words (completion: the shells): those
    words, not file names."""
    found: dict[str, list[str]] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                for a in sub._actions:
                    if not a.option_strings and a.choices:
                        found[name] = [str(c) for c in a.choices]
    return found


def _globals(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions for o in a.option_strings)


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {c.dest: (c.help or "").replace("'", "") for c in action._choices_actions}
    return {}


def zsh(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    helps = _helps(parser)
    described = "\n".join(f"    '{name}:{helps.get(name, '')}'" for name in sorted(commands))
    cases = "\n".join(f"    {name}) opts=({' '.join(opts)}) ;;"
                      for name, opts in sorted(commands.items()))
    words = "\n".join(f"    {name}) [[ $PREFIX != -* ]] && "
                      f"{{ compadd -- {' '.join(w)}; return; }} ;;"
                      for name, w in sorted(_choices(parser).items()))
    return f"""#compdef cargoship
# cargoship zsh completion: cargoship completion zsh > "${{fpath[1]}}/_cargoship"
# (or: source <(cargoship completion zsh))
_cargoship() {{
  local -a subcommands opts
  subcommands=(
{described}
  )
  local cmd="" i
  for ((i = 2; i < CURRENT; i++)); do
    case ${{words[i]}} in
      --log-file) ((i++)) ;;
      -*) ;;
      *) cmd=${{words[i]}}; break ;;
    esac
  done
  if [[ -z $cmd ]]; then
    _describe -t commands 'cargoship command' subcommands
    compadd -- {' '.join(_globals(parser))}
    return
  fi
  case $cmd in
{words}
  esac
  case $cmd in
{cases}
    *) opts=() ;;
  esac
  if [[ $PREFIX == -* ]]; then
    compadd -- $opts
  else
    _files
  fi
}}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
  _cargoship "$@"
else
  compdef _cargoship cargoship
fi
"""


def fish(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    helps = _helps(parser)
    names = " ".join(sorted(commands))
    lines = ["# cargoship fish completion: cargoship completion fish | source",
             "# (or save it as ~/.config/fish/completions/cargoship.fish)",
             "complete -c cargoship -f"]
    for name in sorted(commands):
        lines.append(f"complete -c cargoship -n 'not __fish_seen_subcommand_from {names}' "
                     f"-a {name} -d '{helps.get(name, '')}'")
    for option in _globals(parser):
        lines.append(f"complete -c cargoship {_fish_option(option)}")
    for name, words in sorted(_choices(parser).items()):
        lines.append(f"complete -c cargoship -n '__fish_seen_subcommand_from {name}' "
                     f"-a '{' '.join(words)}'")
    for name, opts in sorted(commands.items()):
        for option in opts:
            lines.append(f"complete -c cargoship -n '__fish_seen_subcommand_from {name}' "
                         f"{_fish_option(option)} -F")
    return "\n".join(lines) + "\n"


def _fish_option(option: str) -> str:
    if option.startswith("--"):
        return f"-l {option[2:]}"
    # fish's -o is an old-style (single dash, long) option such as -out.
    return f"-s {option[1:]}" if len(option) == 2 else f"-o {option[1:]}"


def bash(parser: argparse.ArgumentParser) -> str:
    commands = _commands(parser)
    cases = "\n".join(f"    {name}) opts=\"{' '.join(opts)}\" ;;"
                      for name, opts in sorted(commands.items()))
    words = "\n".join(f"    {name}) words=\"{' '.join(w)}\" ;;"
                      for name, w in sorted(_choices(parser).items()))
    return f"""# cargoship bash completion: eval "$(cargoship completion bash)"
_cargoship() {{
  local cur=${{COMP_WORDS[COMP_CWORD]}} cmd="" opts words="" i
  # The subcommand is the first word that is not an option (global options may come first).
  for ((i = 1; i < COMP_CWORD; i++)); do
    case "${{COMP_WORDS[i]}}" in
      --log-file) ((i++)) ;;
      -*) ;;
      *) cmd=${{COMP_WORDS[i]}}; break ;;
    esac
  done
  if [ -z "$cmd" ]; then
    COMPREPLY=($(compgen -W "{' '.join([*sorted(commands), *_globals(parser)])}" \\
      -- "$cur"))
    return
  fi
  case "$cmd" in
{cases}
    *) opts="" ;;
  esac
  case "$cmd" in
{words}
  esac
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
  elif [ -n "$words" ]; then
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}}
complete -F _cargoship cargoship
"""


SHELLS = {"bash": bash, "zsh": zsh, "fish": fish}
