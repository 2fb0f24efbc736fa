"""Ordering of versions following the SemVer 2.0.0 precedence rules.

* major, minor and patch are compared numerically;
* a pre-release version has lower precedence than the normal version;
* pre-release identifiers are compared one by one: identifiers made only
  of digits are compared numerically, others lexically in ASCII order,
  and numeric identifiers always sort before alphanumeric ones;
* a longer list of identifiers wins when all preceding ones are equal;
* build metadata is ignored.
"""

from .version import parse


def _identifier_key(identifier):
    if identifier.isdigit():
        return (0, identifier)
    return (1, identifier)


def precedence_key(version):
    """Return a sort key implementing SemVer precedence for ``version``.

    ``version`` may be a string or a :class:`~semverlite.Version`.
    """
    v = parse(version)
    core = (v.major, v.minor, v.patch)
    if not v.prerelease:
        return core + ((1,),)
    return core + ((0,) + tuple(_identifier_key(i) for i in v.prerelease),)


def compare(left, right):
    """Return -1, 0 or 1 as ``left`` is lower, equal or higher than ``right``."""
    a, b = precedence_key(left), precedence_key(right)
    return (a > b) - (a < b)


def sort_versions(versions, reverse=False):
    """Return the version strings sorted from lowest to highest precedence."""
    return sorted(versions, key=precedence_key, reverse=reverse)


def latest(versions, include_prerelease=False):
    """Return the highest version in ``versions`` or None when it is empty.

    Pre-releases are skipped unless ``include_prerelease`` is true.
    """
    candidates = [
        v for v in versions if include_prerelease or not parse(v).is_prerelease
    ]
    if not candidates:
        return None
    return max(candidates, key=precedence_key)
