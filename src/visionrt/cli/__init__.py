"""Command-line interface: parsing and printing only; the library does the work."""
