"""The plan: its model (plain data) and its file codec."""
