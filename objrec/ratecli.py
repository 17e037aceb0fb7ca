"""The ``objrec rate`` command."""
