"""Slug generation."""

from .text import fold_to_ascii, split_words


def slugify(text, separator="-", max_length=None, stopwords=()):
    """Return a lower-case ASCII slug for ``text``.

    Words are runs of letters and digits after accents are folded away;
    everything else acts as a word boundary.  Words listed in ``stopwords``
    are dropped, ignoring case, unless that would leave no words at all.
    When ``max_length`` is given the slug is cut at a word boundary so that
    it is at most that long (a single over-long word is truncated).

    >>> slugify("Hello, World!")
    'hello-world'
    """
    words = split_words(fold_to_ascii(text))
    stop = {word.lower() for word in stopwords}
    kept = [word for word in words if word not in stop]
    if not kept:
        kept = words
    kept = [word.lower() for word in kept]
    slug = separator.join(kept)
    if max_length is None or len(slug) <= max_length:
        return slug
    result = ""
    for word in kept:
        candidate = word if not result else result + separator + word
        if len(candidate) > max_length:
            break
        result = candidate
    return result or kept[0][:max_length]


def unique_slug(text, existing, separator="-", **options):
    """Return a slug for ``text`` that is not already in ``existing``.

    A numeric suffix (``-2``, ``-3``, ...) is appended on collisions.
    ``options`` are passed on to :func:`slugify`.
    """
    base = slugify(text, separator=separator, **options)
    taken = set(existing)
    if base not in taken:
        return base
    counter = 2
    while f"{base}{separator}{counter}" in taken:
        counter += 1
    return f"{base}{separator}{counter}"
