"""Exit statuses of the ``kvplan`` command and the error of bad command-line input.

>>> EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT
(0, 1, 2)
"""

EXIT_OK, EXIT_FAIL, EXIT_BAD_INPUT = 0, 1, 2


class CliError(ValueError):
    """Bad command-line input; printed as ``error: …`` with exit status 2.

    >>> str(CliError("give either LOG files or --room"))
    'give either LOG files or --room'
    """
