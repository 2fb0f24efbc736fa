"""Parsing CSV records back into lists of strings."""


class CSVError(ValueError):
    """Raised for malformed CSV input."""


def parse_line(record, delimiter=",", quotechar='"'):
    """Split one CSV record into a list of field strings.

    ``record`` may contain line breaks inside quoted fields; a trailing
    ``"\\r\\n"`` or ``"\\n"`` after the last field is ignored.  Doubled quote
    characters inside a quoted field stand for one quote character.
    """
    if record.endswith("\r\n"):
        record = record[:-2]
    elif record.endswith("\n"):
        record = record[:-1]
    fields = []
    current = []
    in_quotes = False
    i = 0
    while i < len(record):
        char = record[i]
        if in_quotes:
            if char == quotechar:
                if record[i + 1 : i + 2] == quotechar:
                    current.append(quotechar)
                    i += 1
                else:
                    in_quotes = False
            else:
                current.append(char)
        elif char == quotechar:
            if current:
                raise CSVError(f"unexpected quote at position {i}")
            in_quotes = True
        elif char == delimiter:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
        i += 1
    if in_quotes:
        raise CSVError("unterminated quoted field")
    fields.append("".join(current))
    return fields
