"""Reports: tables for the terminal and JSON-ready dicts, with every energy figure labelled."""
