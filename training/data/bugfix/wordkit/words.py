"""Word games and text statistics."""


def word_count(text):
    """Words separated by whitespace."""
    return len(text.split())


def longest_word(text):
    """The first longest word ('' for no words)."""
    best = ""
    for word in text.split():
        if len(word) > len(best):
            best = word
    return best


def is_anagram(a, b):
    """True when a and b use the same letters (case and spaces ignored)."""
    clean_a = sorted(a.replace(" ", "").lower())
    clean_b = sorted(b.replace(" ", "").lower())
    return clean_a == clean_b


def caesar(text, shift):
    """Shifts letters through the alphabet, keeping case; other characters stay."""
    out = []
    for ch in text:
        if ch.isalpha():
            base = ord("A") if ch.isupper() else ord("a")
            out.append(chr((ord(ch) - base + shift) % 26 + base))
        else:
            out.append(ch)
    return "".join(out)


def acronym(phrase):
    """'portable network graphics' -> 'PNG' (hyphens split words too)."""
    words = phrase.replace("-", " ").split()
    return "".join(word[0].upper() for word in words)


def pig_latin(word):
    """Moves the leading consonants to the end and adds 'ay'; vowel-first words add 'way'."""
    vowels = "aeiou"
    if word[0] in vowels:
        return word + "way"
    for i, ch in enumerate(word):
        if ch in vowels:
            return word[i:] + word[:i] + "ay"
    return word + "ay"


def word_frequencies(text):
    """[(word, count)] sorted by count descending, then word."""
    counts = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))


def first_unique_char(text):
    """Index of the first character that occurs once, or -1."""
    counts = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    for i, ch in enumerate(text):
        if counts[ch] == 1:
            return i
    return -1


def is_pangram(text):
    """True when every letter a-z appears."""
    letters = {ch for ch in text.lower() if "a" <= ch <= "z"}
    return len(letters) == 26


def rle_encode(text):
    """'aaabcc' -> 'a3b1c2'."""
    if not text:
        return ""
    out = []
    current, count = text[0], 1
    for ch in text[1:]:
        if ch == current:
            count += 1
        else:
            out.append(f"{current}{count}")
            current, count = ch, 1
    out.append(f"{current}{count}")
    return "".join(out)


def rle_decode(code):
    """'a3b1c2' -> 'aaabcc' (counts may have several digits)."""
    out = []
    i = 0
    while i < len(code):
        ch = code[i]
        j = i + 1
        while j < len(code) and code[j].isdigit():
            j += 1
        out.append(ch * int(code[i + 1:j]))
        i = j
    return "".join(out)


def scrabble_score(word):
    """Sum of the letter values (a=1 ... z=10, a reduced table)."""
    values = {"aeioulnrst": 1, "dg": 2, "bcmp": 3, "fhvwy": 4, "k": 5, "jx": 8, "qz": 10}
    score = 0
    for ch in word.lower():
        for letters, value in values.items():
            if ch in letters:
                score += value
    return score


def capitalize_sentences(text):
    """Upper-cases the first letter of the text and of each letter after '. '."""
    out = []
    upper_next = True
    for ch in text:
        if upper_next and ch.isalpha():
            out.append(ch.upper())
            upper_next = False
        else:
            out.append(ch)
            if ch in ".!?":
                upper_next = True
    return "".join(out)
