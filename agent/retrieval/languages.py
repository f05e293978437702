"""The tree-sitter languages Composer parses: one registry shared by lints, chunking and tags.

    from agent.retrieval import languages
    name = languages.language_for("src/app.tsx")    # "tsx"; None for a suffix we have no grammar for
    tree = languages.parse(name, text)              # a tree_sitter.Tree (the thread's last parse is reused)
    query = languages.tags_query(name)              # a tree_sitter.Query, or None
    spec = languages.LANGUAGES[name]                # the node types chunking treats as functions, classes...
    definition_name(node)                           # ("Foo.bar", True) for `func (f *Foo) bar()`

Each grammar comes from its own wheel (tree-sitter-python, tree-sitter-cpp, ...), which holds the
compiled parser and, for most languages, `queries/tags.scm`; nothing is downloaded at run time.
Tags queries are the wheel's tags.scm plus EXTRA_TAGS written here for what a wheel lacks:
references for C, C++ and Java types, Python base classes and decorators, Go constants, Rust
trait method signatures and `Type::f()` calls, Markdown headings. TypeScript's tags.scm only
adds TypeScript's own nodes to JavaScript's, so TypeScript and TSX use both.

Parsers are cached per thread (a tree_sitter.Parser is not safe to share between threads).
"""

from __future__ import annotations

import importlib
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from tree_sitter import Language, Parser, Query, Tree

if TYPE_CHECKING:
    from tree_sitter import Node


@dataclass(frozen=True)
class LanguageSpec:
    name: str
    module: str
    """The grammar wheel's module, e.g. "tree_sitter_python"."""
    function: str
    """The module's function returning the grammar, e.g. "language" or "language_tsx"."""
    suffixes: tuple[str, ...]
    tags_from: tuple[str, ...] = ()
    """Modules whose queries/tags.scm make up this language's tags query."""
    functions: frozenset[str] = frozenset()
    """Node types chunked as functions (as methods inside a class)."""
    classes: frozenset[str] = frozenset()
    """Class-like node types: one chunk when small, collapsed to member signatures when large."""
    wrappers: frozenset[str] = frozenset()
    """Node types holding a definition (decorators, export, template): chunked as what they hold."""
    scopes: frozenset[str] = frozenset()
    """Namespaces, modules, preprocessor blocks: their members are chunked like top-level ones."""
    variables: frozenset[str] = frozenset()
    """Declarations that define a function when their one value is one (`const f = () => 1`)."""
    attached: frozenset[str] = frozenset()
    """Comments and attributes: part of the definition right below them."""


def _set(names: str) -> frozenset[str]:
    return frozenset(names.split())


_JS_FUNCTIONS = "function_declaration generator_function_declaration method_definition"
_JS_CLASSES = "class_declaration class"
_TS_FUNCTIONS = f"{_JS_FUNCTIONS} function_signature method_signature abstract_method_signature"
_TS_CLASSES = (f"{_JS_CLASSES} abstract_class_declaration interface_declaration enum_declaration "
               "type_alias_declaration")
_TS = dict(tags_from=("tree_sitter_typescript", "tree_sitter_javascript"),
           functions=_set(_TS_FUNCTIONS), classes=_set(_TS_CLASSES),
           wrappers=_set("export_statement ambient_declaration expression_statement"),
           scopes=_set("internal_module module"),
           variables=_set("lexical_declaration variable_declaration"), attached=_set("comment"))
_PREPROC = "preproc_ifdef preproc_if preproc_else preproc_elif preproc_elifdef"
_C_CLASSES = "struct_specifier union_specifier enum_specifier type_definition"

LANGUAGES: dict[str, LanguageSpec] = {spec.name: spec for spec in [
    LanguageSpec("python", "tree_sitter_python", "language", (".py", ".pyi"),
                 tags_from=("tree_sitter_python",), functions=_set("function_definition"),
                 classes=_set("class_definition"), wrappers=_set("decorated_definition"),
                 attached=_set("comment")),
    LanguageSpec("javascript", "tree_sitter_javascript", "language", (".js", ".mjs", ".cjs", ".jsx"),
                 tags_from=("tree_sitter_javascript",), functions=_set(_JS_FUNCTIONS),
                 classes=_set(_JS_CLASSES), wrappers=_set("export_statement"),
                 variables=_set("lexical_declaration variable_declaration"), attached=_set("comment")),
    LanguageSpec("typescript", "tree_sitter_typescript", "language_typescript", (".ts", ".mts", ".cts"),
                 **_TS),
    LanguageSpec("tsx", "tree_sitter_typescript", "language_tsx", (".tsx",), **_TS),
    LanguageSpec("go", "tree_sitter_go", "language", (".go",), tags_from=("tree_sitter_go",),
                 functions=_set("function_declaration method_declaration"),
                 classes=_set("type_declaration"), attached=_set("comment")),
    LanguageSpec("rust", "tree_sitter_rust", "language", (".rs",), tags_from=("tree_sitter_rust",),
                 functions=_set("function_item function_signature_item macro_definition"),
                 classes=_set("struct_item enum_item union_item trait_item impl_item type_item"),
                 scopes=_set("mod_item"),
                 attached=_set("line_comment block_comment attribute_item")),
    LanguageSpec("java", "tree_sitter_java", "language", (".java",), tags_from=("tree_sitter_java",),
                 functions=_set("method_declaration constructor_declaration compact_constructor_declaration"),
                 classes=_set("class_declaration interface_declaration enum_declaration "
                              "record_declaration annotation_type_declaration"),
                 scopes=_set("enum_body_declarations"), attached=_set("line_comment block_comment")),
    LanguageSpec("c", "tree_sitter_c", "language", (".c",), tags_from=("tree_sitter_c",),
                 functions=_set("function_definition"), classes=_set(_C_CLASSES),
                 scopes=_set(_PREPROC), attached=_set("comment")),
    LanguageSpec("cpp", "tree_sitter_cpp", "language",
                 (".cpp", ".cc", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".h"),
                 tags_from=("tree_sitter_cpp",), functions=_set("function_definition"),
                 classes=_set(f"{_C_CLASSES} class_specifier"), wrappers=_set("template_declaration"),
                 scopes=_set(f"{_PREPROC} namespace_definition linkage_specification"),
                 attached=_set("comment")),
    LanguageSpec("lua", "tree_sitter_lua", "language", (".lua",), tags_from=("tree_sitter_lua",),
                 functions=_set("function_declaration"),
                 variables=_set("variable_declaration assignment_statement"), attached=_set("comment")),
    LanguageSpec("markdown", "tree_sitter_markdown", "language", (".md", ".markdown")),
    LanguageSpec("json", "tree_sitter_json", "language", (".json",)),
]}
"""Every language we parse, by name. ".h" is parsed as C++, which reads nearly all C as well."""

SUFFIXES: dict[str, str] = {suffix: spec.name for spec in LANGUAGES.values() for suffix in spec.suffixes}
"""Lower-case file suffix -> language name."""

_C_REFS = """
(call_expression function: (identifier) @name) @reference.call
(call_expression function: (field_expression field: (field_identifier) @name)) @reference.call
(type_identifier) @name @reference.type
"""
EXTRA_TAGS: dict[str, str] = {
    "python": """
(class_definition superclasses: (argument_list (identifier) @name) @reference.class)
(class_definition superclasses: (argument_list (attribute attribute: (identifier) @name)) @reference.class)
(decorator (identifier) @name) @reference.call
(decorator (attribute attribute: (identifier) @name)) @reference.call
""",
    "rust": """
(function_signature_item name: (identifier) @name) @definition.method
(call_expression function: (scoped_identifier name: (identifier) @name)) @reference.call
""",
    "go": """
(source_file (const_declaration (const_spec name: (identifier) @name) @definition.constant))
""",
    "java": """
(enum_declaration name: (identifier) @name) @definition.class
(record_declaration name: (identifier) @name) @definition.class
(type_identifier) @name @reference.type
""",
    "c": _C_REFS,
    "cpp": _C_REFS + """
(call_expression function: (qualified_identifier name: (identifier) @name)) @reference.call
""",
    "markdown": """
(atx_heading heading_content: (inline) @name) @definition.section
(setext_heading heading_content: (paragraph) @name) @definition.section
""",
}
"""Tags patterns added to the wheels' tags.scm (capture names as in tags.scm: @name plus
@definition.KIND or @reference.KIND)."""


def language_for(path: str) -> str | None:
    """The language of a file, by its suffix; None when no grammar reads it."""
    return SUFFIXES.get(PurePosixPath(path).suffix.lower())


@cache
def grammar(name: str) -> Language:
    spec = LANGUAGES[name]
    return Language(getattr(importlib.import_module(spec.module), spec.function)())


_local = threading.local()


def parser(name: str) -> Parser:
    """This thread's parser for a language."""
    parsers = _local.__dict__.setdefault("parsers", {})
    if name not in parsers:
        parsers[name] = Parser(grammar(name))
    return parsers[name]


def parse(name: str, text: str) -> Tree:
    """Parse `text` (UTF-8, unencodable characters replaced). The thread's last parse is reused
    when asked again for the same text, so chunking and tagging a file parse it once."""
    last = getattr(_local, "last", None)
    if last is not None and last[0] == name and (last[1] is text or last[1] == text):
        return last[2]
    tree = parser(name).parse(text.encode("utf-8", "replace"))
    _local.last = (name, text, tree)
    return tree


@cache
def tags_query(name: str) -> Query | None:
    """The tags query for a language: wheel tags.scm files plus EXTRA_TAGS; None if it has none."""
    spec = LANGUAGES[name]
    parts = [importlib.import_module(module).TAGS_QUERY for module in spec.tags_from]
    parts.append(EXTRA_TAGS.get(name, ""))
    source = "\n".join(parts).strip()
    return Query(grammar(name), source) if source else None


# ---- reading definitions from syntax nodes (shared by chunking and tags) -----------------------

_FUNCTION_VALUES = frozenset({"arrow_function", "function_expression", "function", "generator_function",
                              "function_definition"})
_BODIED_TYPES = frozenset({"struct_specifier", "union_specifier", "enum_specifier", "class_specifier"})


def node_text(node: Node | None) -> str:
    return (node.text or b"").decode("utf-8", "replace") if node is not None else ""


def qualified(name: str) -> str:
    """`Foo::bar`, `M:bar`, `"mod"` -> Foo.bar, M.bar, mod."""
    return name.strip().strip("\"'").replace("::", ".").replace(":", ".")


def class_body(owner: Node | None) -> Node | None:
    """The node holding a class-like definition's members (block, class_body, declaration_list...)."""
    if owner is None:
        return None
    if owner.type == "type_definition":  # C: typedef struct { ... } Foo;
        owner = owner.child_by_field_name("type")
        if owner is None:
            return None
    return owner.child_by_field_name("body")


def definition_name(inner: Node) -> tuple[str, bool]:
    """A definition's (qualified) name, and whether its name makes it a method (Go receivers,
    C++ `Foo::bar`, Lua `M:bar`); "" when it has none worth a chunk of its own."""
    kind = inner.type
    if kind in _BODIED_TYPES and inner.child_by_field_name("body") is None:
        return "", False  # a forward declaration or a use: `struct foo;`
    if kind == "type_definition":
        if class_body(inner) is None:
            return "", False
        leaf = _declarator_leaf(inner)
        return (qualified(node_text(leaf)) if leaf is not None else ""), False
    if kind == "type_declaration":  # Go: one spec is a type; `type ( A ...; B ... )` is glue
        specs = [c for c in inner.named_children if c.type in ("type_spec", "type_alias")]
        named = specs[0].child_by_field_name("name") if len(specs) == 1 else None
        return (node_text(named) if named is not None else ""), False
    if kind == "impl_item":
        return _type_name(inner.child_by_field_name("type")), False
    receiver = inner.child_by_field_name("receiver") if kind == "method_declaration" else None
    name = inner.child_by_field_name("name")
    if name is None:
        name = _declarator_leaf(inner)  # C and C++ functions
        if name is None:
            return "", False
    text = node_text(name)
    if receiver is not None:
        params = receiver.named_children
        owner = _type_name(params[0].child_by_field_name("type")) if params else ""
        return (f"{owner}.{text}" if owner else text), True
    return qualified(text), "::" in text or name.type == "method_index_expression"


def _declarator_leaf(node: Node) -> Node | None:
    """The name at the bottom of a C declarator chain (`*(add)(int a)` -> add)."""
    found = node.child_by_field_name("declarator")
    while found is not None:
        inner = found.child_by_field_name("declarator")
        if inner is None and found.type.endswith("_declarator") and found.named_children:
            inner = found.named_children[-1]
        if inner is None:
            break
        found = inner
    return found


def _type_name(node: Node | None) -> str:
    """`*Foo`, `Foo<T>`, `a::Foo` -> Foo."""
    while node is not None:
        if node.type in ("type_identifier", "identifier"):
            return node_text(node)
        inner = node.child_by_field_name("name") or node.child_by_field_name("type")
        node = inner if inner is not None else (node.named_children[0] if node.named_children else None)
    return ""


def variable_definition(node: Node) -> tuple[str, str, bool, Node] | None:
    """`const f = () => ...`, `local g = function() end`: (base, name, False, value) or None."""
    pairs = [(d.child_by_field_name("name"), d.child_by_field_name("value"))
             for d in node.named_children if d.type == "variable_declarator"]
    if not pairs:  # Lua: (variable_declaration) (assignment_statement (variable_list) (expression_list))
        assign = node if node.type == "assignment_statement" else next(
            (c for c in node.named_children if c.type == "assignment_statement"), None)
        if assign is not None and len(assign.named_children) == 2:
            names, values = assign.named_children[0].named_children, assign.named_children[1].named_children
            if len(names) == 1 and len(values) == 1:
                pairs = [(names[0], values[0])]
    if len(pairs) != 1 or pairs[0][0] is None or pairs[0][1] is None:
        return None
    name, value = pairs[0]
    if value.type in _FUNCTION_VALUES:
        return "function", qualified(node_text(name)), False, value
    if value.type == "class":
        return "class", qualified(node_text(name)), False, value
    return None
