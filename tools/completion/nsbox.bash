# bash completion for nsbox: commands, subcommands and options, read from nsbox's own --help so that they stay in step
# with the program. Installed as /usr/share/bash-completion/completions/nsbox.

# The names listed under a CLI11 help text's "Subcommands:", or its options' spellings under "Options:".
_nsbox_help_section() {  # section (Subcommands|Options), help text on stdin
  awk -v section="$1:" '
    $0 == section { inside = 1; next }
    /^[^ ]/ { inside = 0 }
    inside && $1 ~ /^[-a-z]/ {
      if (section == "Subcommands:") { print $1; next }
      n = split($1, spellings, ",")
      for (i = 1; i <= n; i++) if (spellings[i] ~ /^-/) print spellings[i]
    }'
}

_nsbox() {
  local cur=${COMP_WORDS[COMP_CWORD]} program=${COMP_WORDS[0]} path=() i word commands help
  for ((i = 1; i < COMP_CWORD; i++)); do
    word=${COMP_WORDS[i]}
    if [[ $word == -- ]]; then  # what follows is the sandboxed command and its arguments
      COMPREPLY=($(compgen -c -f -- "$cur"))
      return
    fi
    [[ $word == -* ]] && continue
    commands=$("$program" "${path[@]}" --help 2>/dev/null | _nsbox_help_section Subcommands)
    [[ $'\n'$commands$'\n' == *$'\n'$word$'\n'* ]] && path+=("$word")
  done
  help=$("$program" "${path[@]}" --help 2>/dev/null)
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_nsbox_help_section Options <<<"$help")" -- "$cur"))
    return
  fi
  commands=$(_nsbox_help_section Subcommands <<<"$help")
  if [[ -n $commands ]]; then
    COMPREPLY=($(compgen -W "$commands" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -F _nsbox nsbox
