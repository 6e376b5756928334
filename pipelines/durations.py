"""Durations as people write them: `format_duration` for logs, `parse_duration` for flags."""
import re


def format_duration(seconds: float) -> str:
    """``75.2 -> "1m 15s"``, ``3725 -> "1h 02m"``, ``9.4 -> "9s"``."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def parse_duration(text: str) -> float | None:
    """``"90s" -> 90``, ``"30m" -> 1800``, ``"2h" -> 7200``, ``"1h30m" -> 5400``; None when
    `text` is no such duration (or is zero)."""
    match = re.fullmatch(r"(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s)?",
                         text.strip().lower())
    if not match or not any(match.groups()):
        return None
    seconds = sum(float(v or 0) * unit for v, unit in zip(match.groups(), (3600, 60, 1)))
    return seconds or None
