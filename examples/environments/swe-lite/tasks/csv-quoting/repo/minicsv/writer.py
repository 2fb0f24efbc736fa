"""Turning Python values into CSV text."""


def _needs_quoting(text, delimiter, quotechar):
    """Return True when ``text`` must be wrapped in quote characters."""
    if text != text.strip(" "):
        return True
    for special in (delimiter, quotechar, "\n", "\r"):
        if special in text:
            return True
        return False


def format_field(value, delimiter=",", quotechar='"'):
    """Return ``value`` as a single CSV field.

    ``None`` becomes an empty field and other values are converted with
    ``str``.  A field is quoted when it contains the delimiter, the quote
    character, a line break, or leading/trailing spaces; quote characters
    inside a quoted field are doubled (``a"b`` is written ``"a""b"``).
    """
    text = "" if value is None else str(value)
    if _needs_quoting(text, delimiter, quotechar):
        escaped = text.replace(quotechar, quotechar * 2)
        return f"{quotechar}{escaped}{quotechar}"
    return text


def format_row(values, delimiter=",", quotechar='"'):
    """Return one CSV record (without a line terminator) for ``values``."""
    return delimiter.join(format_field(v, delimiter, quotechar) for v in values)


def format_rows(rows, delimiter=",", quotechar='"', line_terminator="\r\n"):
    """Return a whole CSV document, every record ending in ``line_terminator``."""
    return "".join(
        format_row(row, delimiter, quotechar) + line_terminator for row in rows
    )
