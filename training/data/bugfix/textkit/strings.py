"""Small string helpers."""


def snake_case(name):
    """'HelloWorld' -> 'hello_world'; spaces and dashes become underscores."""
    out = []
    for i, ch in enumerate(name):
        if ch in " -":
            out.append("_")
        elif ch.isupper() and i > 0 and name[i - 1] not in " -_":
            out.append("_" + ch.lower())
        else:
            out.append(ch.lower())
    return "".join(out)


def camel_case(name):
    """'hello_world' -> 'helloWorld'."""
    parts = [p for p in name.split("_") if p]
    if not parts:
        return ""
    return parts[0].lower() + "".join(p[:1].upper() + p[1:].lower() for p in parts[1:])


def truncate(text, width, suffix="..."):
    """Cuts text to at most `width` characters, ending with `suffix` when cut."""
    if len(text) <= width:
        return text
    keep = width - len(suffix)
    if keep <= 0:
        return suffix[:width]
    return text[:keep] + suffix


def center_pad(text, width, fill="*"):
    """Centers text in `width` characters; an odd remainder goes to the right."""
    total = width - len(text)
    if total <= 0:
        return text
    left = total // 2
    right = total - left
    return fill * left + text + fill * right


def count_vowels(text):
    """How many of a, e, i, o, u (either case) the text holds."""
    return sum(1 for ch in text.lower() if ch in "aeiou")


def is_palindrome(text):
    """True when the letters and digits read the same both ways (case ignored)."""
    chars = [ch.lower() for ch in text if ch.isalnum()]
    n = len(chars)
    for i in range(n // 2):
        if chars[i] != chars[n - 1 - i]:
            return False
    return True


def reverse_words(sentence):
    """'a b c' -> 'c b a' (runs of spaces collapse to one)."""
    return " ".join(reversed(sentence.split()))


def strip_prefix(text, prefix):
    """text without `prefix` at its start; unchanged when it does not start so."""
    if prefix and text.startswith(prefix):
        return text[len(prefix):]
    return text


def common_prefix(words):
    """The longest prefix every word shares ('' for no words)."""
    if not words:
        return ""
    prefix = words[0]
    for word in words[1:]:
        i = 0
        while i < len(prefix) and i < len(word) and prefix[i] == word[i]:
            i += 1
        prefix = prefix[:i]
    return prefix


def initials(full_name, sep="."):
    """'ada lovelace' -> 'A.L.'."""
    return "".join(part[0].upper() + sep for part in full_name.split())


def wrap_words(text, width):
    """Greedy word wrap: lines of at most `width` characters (longer words stand alone)."""
    lines = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def mask(secret, visible=4, char="#"):
    """Hides all but the last `visible` characters."""
    if len(secret) <= visible:
        return secret
    return char * (len(secret) - visible) + secret[-visible:]
