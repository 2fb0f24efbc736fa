"""Parsing of version strings into :class:`Version` objects."""

import re
from dataclasses import dataclass

_PATTERN = re.compile(
    r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?$"
)


class VersionError(ValueError):
    """Raised for strings that are not valid semantic versions."""


@dataclass(frozen=True)
class Version:
    """A parsed semantic version.

    ``prerelease`` and ``build`` are tuples of the dot-separated
    identifiers, e.g. ``1.0.0-rc.1+build.5`` has ``prerelease=("rc", "1")``
    and ``build=("build", "5")``.
    """

    major: int
    minor: int
    patch: int
    prerelease: tuple = ()
    build: tuple = ()

    def __str__(self):
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    @property
    def is_prerelease(self):
        """True when the version carries a pre-release tag."""
        return bool(self.prerelease)


def parse(text):
    """Parse ``text`` (a leading ``v`` is allowed) into a :class:`Version`."""
    if isinstance(text, Version):
        return text
    match = _PATTERN.match(text.strip().removeprefix("v"))
    if match is None:
        raise VersionError(f"not a semantic version: {text!r}")
    major, minor, patch, pre, build = match.groups()
    prerelease = tuple(pre.split(".")) if pre else ()
    for ident in prerelease:
        if ident.isdigit() and len(ident) > 1 and ident.startswith("0"):
            raise VersionError(f"numeric identifier with leading zero in {text!r}")
    return Version(
        int(major),
        int(minor),
        int(patch),
        prerelease,
        tuple(build.split(".")) if build else (),
    )
