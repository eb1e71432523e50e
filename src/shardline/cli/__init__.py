"""The command-line edge: parse arguments, call the core, render. No model logic here."""
