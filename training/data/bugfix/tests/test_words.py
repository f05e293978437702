from wordkit.words import (
    acronym,
    caesar,
    capitalize_sentences,
    first_unique_char,
    is_anagram,
    is_pangram,
    longest_word,
    pig_latin,
    rle_decode,
    rle_encode,
    scrabble_score,
    word_count,
    word_frequencies,
)


def test_word_count():
    assert word_count("the quick  brown fox") == 4
    assert word_count("") == 0
    assert word_count("one") == 1


def test_longest_word():
    assert longest_word("a bb ccc dd") == "ccc"
    assert longest_word("ab cd") == "ab"
    assert longest_word("") == ""


def test_is_anagram():
    assert is_anagram("Listen", "Silent")
    assert is_anagram("dormitory", "dirty room")
    assert not is_anagram("abc", "abd")
    assert not is_anagram("aab", "ab")


def test_caesar():
    assert caesar("abc", 1) == "bcd"
    assert caesar("xyz", 3) == "abc"
    assert caesar("Hello, World!", 13) == "Uryyb, Jbeyq!"
    assert caesar("bcd", -1) == "abc"


def test_acronym():
    assert acronym("portable network graphics") == "PNG"
    assert acronym("Complementary metal-oxide semiconductor") == "CMOS"
    assert acronym("") == ""


def test_pig_latin():
    assert pig_latin("apple") == "appleway"
    assert pig_latin("string") == "ingstray"
    assert pig_latin("pig") == "igpay"
    assert pig_latin("rhythm") == "rhythmay"


def test_word_frequencies():
    assert word_frequencies("b a b c a b") == [("b", 3), ("a", 2), ("c", 1)]
    assert word_frequencies("Dog dog cat") == [("dog", 2), ("cat", 1)]
    assert word_frequencies("y x") == [("x", 1), ("y", 1)]


def test_first_unique_char():
    assert first_unique_char("leetcode") == 0
    assert first_unique_char("loveleetcode") == 2
    assert first_unique_char("aabb") == -1
    assert first_unique_char("") == -1


def test_is_pangram():
    assert is_pangram("The quick brown fox jumps over the lazy dog")
    assert not is_pangram("The quick brown fox jumps over the dog")
    assert not is_pangram("")


def test_rle_encode():
    assert rle_encode("aaabcc") == "a3b1c2"
    assert rle_encode("") == ""
    assert rle_encode("z") == "z1"
    assert rle_encode("abab") == "a1b1a1b1"


def test_rle_decode():
    assert rle_decode("a3b1c2") == "aaabcc"
    assert rle_decode("x12") == "x" * 12
    assert rle_decode("") == ""


def test_scrabble_score():
    assert scrabble_score("cabbage") == 14
    assert scrabble_score("Quiz") == 22
    assert scrabble_score("") == 0


def test_capitalize_sentences():
    assert capitalize_sentences("hi. how are you? fine!") == "Hi. How are you? Fine!"
    assert capitalize_sentences("  lead space") == "  Lead space"
    assert capitalize_sentences("a.b") == "A.B"
