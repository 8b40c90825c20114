# Write FILE from stdin (DECODE base64: from its base64), both halves in one; prints
# `backup` when it kept a previous content.
# shellcheck disable=SC2154  # the generated block's variables
tmp=$(cs_stage "$FILE" "$MODE" "$OWNER" "$PLAN" "$DECODE") || exit $?
cs_commit "$FILE" "$PLAN" "$tmp"
