"""Subcommands shared by several integrations (install, uninstall, doctor)."""
