from textkit.strings import (
    camel_case,
    center_pad,
    common_prefix,
    count_vowels,
    initials,
    is_palindrome,
    mask,
    reverse_words,
    snake_case,
    strip_prefix,
    truncate,
    wrap_words,
)


def test_snake_case():
    assert snake_case("HelloWorld") == "hello_world"
    assert snake_case("already_snake") == "already_snake"
    assert snake_case("two words") == "two_words"
    assert snake_case("kebab-case-Name") == "kebab_case_name"
    assert snake_case("X") == "x"


def test_camel_case():
    assert camel_case("hello_world") == "helloWorld"
    assert camel_case("one") == "one"
    assert camel_case("__a__b_c") == "aBC"
    assert camel_case("HTTP_response_CODE") == "httpResponseCode"
    assert camel_case("") == ""


def test_truncate():
    assert truncate("hello world", 8) == "hello..."
    assert truncate("short", 5) == "short"
    assert truncate("short", 6) == "short"
    assert truncate("abcdef", 2) == ".."
    assert truncate("abcdef", 5, suffix="~") == "abcd~"


def test_center_pad():
    assert center_pad("ab", 6) == "**ab**"
    assert center_pad("ab", 5) == "*ab**"
    assert center_pad("abc", 2) == "abc"
    assert center_pad("x", 4, "-") == "-x--"


def test_count_vowels():
    assert count_vowels("Hello World") == 3
    assert count_vowels("AEIOU xyz") == 5
    assert count_vowels("") == 0
    assert count_vowels("rhythm") == 0


def test_is_palindrome():
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert is_palindrome("abba")
    assert is_palindrome("x")
    assert not is_palindrome("abca")
    assert not is_palindrome("ab")


def test_reverse_words():
    assert reverse_words("one two three") == "three two one"
    assert reverse_words("  spaced   out ") == "out spaced"
    assert reverse_words("single") == "single"


def test_strip_prefix():
    assert strip_prefix("unhappy", "un") == "happy"
    assert strip_prefix("happy", "un") == "happy"
    assert strip_prefix("abc", "") == "abc"
    assert strip_prefix("unun", "un") == "un"


def test_common_prefix():
    assert common_prefix(["flower", "flow", "flight"]) == "fl"
    assert common_prefix(["dog", "car"]) == ""
    assert common_prefix(["same", "same"]) == "same"
    assert common_prefix(["abc"]) == "abc"
    assert common_prefix([]) == ""


def test_initials():
    assert initials("ada lovelace") == "A.L."
    assert initials("Grace Brewster Hopper", sep="") == "GBH"
    assert initials("") == ""


def test_wrap_words():
    assert wrap_words("the quick brown fox", 10) == ["the quick", "brown fox"]
    assert wrap_words("a b c", 3) == ["a b", "c"]
    assert wrap_words("enormous word", 4) == ["enormous", "word"]
    assert wrap_words("", 5) == []


def test_mask():
    assert mask("1234567890") == "######7890"
    assert mask("1234") == "1234"
    assert mask("12345", visible=2, char="*") == "***45"
