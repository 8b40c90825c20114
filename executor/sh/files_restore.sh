# shellcheck disable=SC2154  # the generated block's variables
cs_restore "$FILE" "$BACKUP"
