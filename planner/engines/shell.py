"""The flags a launch script passes to its Python training script, read the way bash would run it.

Enough of bash for the launch scripts people keep next to Megatron-LM (and the engines' own
examples): backslash continuations, comments, quotes that span lines, `;`; scalar and array
variables (`NAME=value`, `NAME=( ... )`, `NAME+=( ... )`, `NAME+=value`, `export`), expanded
where they are used and when they are used, as bash does (`$NAME`, `${NAME}`, `${NAME[@]}`,
`${NAME:-default}`, `${NAME:=default}`, `${NAME:+word}`, positional `$1` / `${1:-default}`);
integer arithmetic `$(( ... ))`; and `if / elif / else / fi` whose tests compare strings or
integers (`[ ]`, `[[ ]]`, `test`, `!`, `&&`, `||`, `-a`, `-o`, `-z`, `-n`, `=`, `==`, `!=`,
`-eq` ... `-le`). A test planner cannot decide (a file test, a variable the file does not
define) makes it read every branch, later ones winning, and say so when a branch changes a
variable or holds the launch command.

A variable the file does not define, and a command substitution `$( ... )`, become markers
(`UNRESOLVED` + name + `UNRESOLVED`) that the caller turns into an error naming the variable
only if it needs the value.

Pure: text in, tokens and warnings out.
"""

from __future__ import annotations

import ast
import fnmatch
import math
import operator
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from planner.errors import PlannerError
from planner.specs.bounds import MAX_SHELL_EXPANSION_CHARS, MAX_SHELL_INT_BITS, MAX_SHELL_WORDS

UNRESOLVED = "\x00"


class ShellError(ValueError):
    """What bash would reject, or what planner will not expand (a limit of planner.specs.bounds), at a line."""

    def __init__(self, message: str, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_KEYWORDS_PASS = frozenset({"then", "do", "else"})


_BLANK = "\x02"  # stands for a blank inside a marker, so that field splitting leaves the marker whole


def marker(name: str) -> str:
    return UNRESOLVED + re.sub(r"\s+", _BLANK, name) + UNRESOLVED


def first_marker(text: str) -> str | None:
    """The name inside the first unresolved marker of `text`, or None."""
    if UNRESOLVED not in text:
        return None
    return text.split(UNRESOLVED)[1].replace(_BLANK, " ")


# text -> statements --------------------------------------------------------------------------
def statements(text: str) -> list[tuple[int, str]]:
    """(line number, statement) pairs: comments dropped, continuations joined, split at unquoted
    newlines and `;` (a newline inside quotes, `( ... )` or `$( ... )` does not end a statement)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    quote = ""
    quote_line = 1
    depth = 0
    line = 1
    start = 1
    i = 0
    n = len(text)

    def flush() -> None:
        stmt = "".join(buf).strip()
        if stmt:
            out.append((start, stmt))
        buf.clear()

    while i < n:
        ch = text[i]
        if quote == "'":
            buf.append(ch)
            if ch == "'":
                quote = ""
        elif ch == "\\" and i + 1 < n:
            if text[i + 1] == "\n":  # continuation: the two characters vanish
                i += 2
                line += 1
                continue
            if text[i + 1] == "\r" and i + 2 < n and text[i + 2] == "\n":
                i += 3
                line += 1
                continue
            buf.append(text[i : i + 2])
            i += 2
            continue
        elif quote == '"':
            buf.append(ch)
            if ch == '"':
                quote = ""
        elif ch in "'\"":
            quote = ch
            quote_line = line
            buf.append(ch)
        elif ch == "#" and (not buf or buf[-1][-1:].isspace() or buf[-1][-1:] in ";("):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif ch in "({":
            depth += ch == "("
            buf.append(ch)
        elif ch in ")}":
            depth -= ch == ")" and depth > 0
            buf.append(ch)
        elif ch == ";" and depth == 0:
            if i + 1 < n and text[i + 1] == ";":  # `;;` in a case statement: keep it
                buf.append(";;")
                i += 2
                continue
            flush()
            start = line
        elif ch == "\n":
            line += 1
            if depth == 0:
                flush()
                start = line
            else:
                buf.append(" ")
        else:
            buf.append(ch)
        if ch == "\n" and quote:
            line += 1
        i += 1
    if quote and "<<" not in text:  # (a here-document's text is not read as words; planner does not parse them)
        raise ShellError(f"unexpected EOF while looking for matching `{quote}' (the quote opened on this line is never "
                         "closed, so bash rejects the script); close it", quote_line)
    flush()
    return out


# expansion -----------------------------------------------------------------------------------------
_OPS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}


def _arith(node: ast.AST) -> int:
    if isinstance(node, ast.Expression):
        return _arith(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return _in_range(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _arith(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp):
        left, right = _arith(node.left), _arith(node.right)
        if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
            if right == 0:
                raise ValueError("division by zero")
            quotient = abs(left) // abs(right)  # bash truncates toward zero
            if isinstance(node.op, ast.Mod):  # and its remainder takes the dividend's sign: -7 % 3 is -1
                remainder = abs(left) - quotient * abs(right)
                return remainder if left >= 0 else -remainder
            return quotient if (left >= 0) == (right >= 0) else -quotient
        if isinstance(node.op, ast.Pow):
            if not 0 <= right <= MAX_SHELL_INT_BITS:
                raise ValueError("exponent out of range")
            if abs(left) > 1 and right * math.log2(abs(left)) >= MAX_SHELL_INT_BITS:
                raise ValueError("power out of 64-bit range")  # bash wraps; planner does not guess
        if type(node.op) in _OPS:
            return _in_range(_OPS[type(node.op)](left, right))
    raise ValueError("not integer arithmetic")


def _in_range(value: int) -> int:
    """An arithmetic value within bash's 64 bits (planner refuses to wrap, as bash does, silently)."""
    if not -(1 << (MAX_SHELL_INT_BITS - 1)) <= value < 1 << (MAX_SHELL_INT_BITS - 1):
        raise ValueError("out of 64-bit range")
    return value


def _find_close(text: str, start: int, open_: str, close: str, depth: int = 1) -> int | None:
    """Index just past the `close` that brings `depth` open `open_`s before `start` back to zero."""
    i = start
    while i < len(text):
        if text.startswith(open_, i):
            depth += 1
            i += len(open_)
            continue
        if text.startswith(close, i):
            depth -= 1
            i += len(close)
            if depth == 0:
                return i
            continue
        i += 1
    return None


def word_spans(text: str) -> list[str]:
    """The words of a statement as written (quotes and expansions kept), split at unquoted blanks."""
    out: list[str] = []
    i, n = 0, len(text)
    start: int | None = None
    while i < n:
        ch = text[i]
        if ch.isspace():
            if start is not None:
                out.append(text[start:i])
                start = None
            i += 1
            continue
        if start is None:
            start = i
        i = _skip(text, i)
    if start is not None:
        out.append(text[start:])
    return out


def _skip(text: str, i: int) -> int:
    """Index past the unit at i: an escape, a quoted string, an expansion, or one character."""
    ch = text[i]
    if ch == "\\":
        return min(i + 2, len(text))
    if ch == "'":
        end = text.find("'", i + 1)
        return len(text) if end < 0 else end + 1
    if ch == '"':
        j = i + 1
        while j < len(text) and text[j] != '"':
            j = _skip(text, j) if text[j] in "\\$`" else j + 1
        return min(j + 1, len(text))
    if ch == "`":
        end = text.find("`", i + 1)
        return len(text) if end < 0 else end + 1
    if ch == "$" and i + 1 < len(text) and text[i + 1] in "({":
        close = ")" if text[i + 1] == "(" else "}"
        closed = _find_close(text, i + 2, text[i + 1], close)
        return len(text) if closed is None else closed
    return i + 1


_PARAM = re.compile(rf"(?P<name>{_NAME}|[0-9]+)(?P<index>\[(?:[@*]|[0-9]+)\])?(?:(?P<op>:?[-=+])(?P<word>.*))?", re.S)


class QuotedWord(str):
    """A command word that does not begin with an unquoted character of the script (it begins with a quote, an
    escape or an expansion): bash never reads it as an operator, so `--eos_token '<|im_end|>'` passes `<|im_end|>`
    to the program where an unquoted `<` would redirect (before_redirection)."""


@dataclass
class _Words:
    """Words being built while expanding: quote removal and field splitting as bash does them."""

    split: bool
    words: list[str] = field(default_factory=list)
    cur: list[str] = field(default_factory=list)
    started: bool = False  # the current word exists (a quoted empty string makes one)
    only_empty_array: bool = False  # ... only because of a quoted empty "${A[@]}", which makes none
    size: int = 0  # characters produced so far, against MAX_SHELL_EXPANSION_CHARS
    plain_start: bool | None = None  # the current word began with an unquoted character of the script

    def grow(self, chars: int) -> None:
        self.size += chars
        if self.size > MAX_SHELL_EXPANSION_CHARS:
            raise ShellError(f"expands to more than {MAX_SHELL_EXPANSION_CHARS:,} characters (planner's limit for a "
                             "launch script; see docs/errors.md)")

    def push(self) -> None:
        if self.started and not (self.only_empty_array and not "".join(self.cur)):
            if len(self.words) >= MAX_SHELL_WORDS:
                raise ShellError(f"expands to more than {MAX_SHELL_WORDS:,} words (planner's limit for a launch "
                                 "script; see docs/errors.md)")
            word = "".join(self.cur)
            self.words.append(word if self.plain_start else QuotedWord(word))
        self.cur.clear()
        self.started = self.only_empty_array = False
        self.plain_start = None

    def literal(self, text: str, *, plain: bool = False) -> None:
        self.grow(len(text))
        if self.plain_start is None and text:
            self.plain_start = plain
        self.cur.append(text)
        self.started = True
        self.only_empty_array = self.only_empty_array and not text

    def expanded(self, value: str, quoted: bool) -> None:
        if quoted or not self.split:
            self.grow(len(value))
            self.cur.append(value)
            self.started = self.started or quoted or bool(value)
            self.only_empty_array = self.only_empty_array and not value
            return
        if not value:
            return
        fields = value.split()
        if not fields or value[0].isspace():
            self.push()
        for k, part in enumerate(fields):
            if k:
                self.push()
            self.literal(part)
        if value[-1].isspace():
            self.push()

    def array(self, items: list[str], quoted: bool) -> None:
        if len(items) > MAX_SHELL_WORDS:
            raise ShellError(f"expands to more than {MAX_SHELL_WORDS:,} words (planner's limit for a launch script; "
                             "see docs/errors.md)")
        if not self.split:
            self.expanded(" ".join(items), quoted)
            return
        if quoted and not items:
            self.only_empty_array = not "".join(self.cur)
            self.started = True
            return
        for k, item in enumerate(items):
            if k and (self.started or quoted):
                self.push()
            self.expanded(item, quoted)

    def done(self) -> list[str]:
        self.push()
        return self.words


@dataclass
class Variables:
    """The script's variables as it runs; unknown names are left as markers."""

    scalars: dict[str, str] = field(default_factory=dict)
    arrays: dict[str, list[str]] = field(default_factory=dict)

    def value(self, name: str) -> str | None:
        if name in self.scalars:
            return self.scalars[name]
        if name in self.arrays:
            return self.arrays[name][0] if self.arrays[name] else ""
        return None

    def words(self, text: str) -> list[str]:
        """Command words: expanded, quotes removed, unquoted expansions split at blanks."""
        return self._expand(text, split=True)

    def string(self, text: str) -> str:
        """One word, as the value of an assignment is: expanded, quotes removed, never split."""
        return "".join(self._expand(text, split=False))

    def _expand(self, text: str, *, split: bool) -> list[str]:
        out = _Words(split=split)
        i, n = 0, len(text)
        while i < n:
            ch = text[i]
            if ch.isspace() and split:
                out.push()
                i += 1
            elif ch == "\\":
                out.literal(text[i + 1 : i + 2])
                i += 2
            elif ch == "'":
                end = _skip(text, i)
                out.literal(text[i + 1 : end - 1] if text[end - 1 : end] == "'" else text[i + 1 : end])
                i = end
            elif ch == '"':
                i = self._double(text, i + 1, out)
            elif ch in "$`":
                i = self._dollar(text, i, out, quoted=False)
            else:
                out.literal(ch, plain=True)
                i += 1
        return out.done()

    def _double(self, text: str, i: int, out: _Words) -> int:
        out.literal("")
        while i < len(text) and text[i] != '"':
            ch = text[i]
            if ch == "\\" and i + 1 < len(text):
                nxt = text[i + 1]
                out.literal(nxt if nxt in '$`"\\' else ch + nxt)
                i += 2
            elif ch in "$`":
                i = self._dollar(text, i, out, quoted=True)
            else:
                out.literal(ch)
                i += 1
        return i + 1

    def _dollar(self, text: str, i: int, out: _Words, *, quoted: bool) -> int:
        """The expansion at text[i] ($... or `...`) added to `out`; the index after it."""
        end = _skip(text, i)
        whole = text[i:end]
        if whole.startswith("$((") and whole.endswith("))"):
            out.expanded(self._arithmetic(whole[3:-2]), quoted)
        elif whole.startswith(("$(", "`")):
            out.expanded(marker(whole.strip()), quoted)
        elif whole.startswith("${"):
            match = _PARAM.fullmatch(whole[2:-1]) if whole.endswith("}") else None
            if match is None:  # ${#X}, ${X:1:2}, ${X/a/b}, ...: not read
                out.expanded(marker(whole), quoted)
            elif match.group("index") in ("[@]", "[*]") and match.group("op") is None \
                    and match.group("name") in self.arrays:
                out.array(self.arrays[match.group("name")], quoted and match.group("index") == "[@]")
            else:
                out.expanded(self._parameter(match), quoted)
        else:
            plain = re.match(rf"\$({_NAME}|[0-9])", text[i:])
            if plain:
                name = plain.group(1)
                value = self.value(name) if not name.isdigit() else None
                out.expanded(marker(name) if value is None else value, quoted)
                return i + plain.end()
            if text[i + 1 : i + 2] and text[i + 1] in "@*#?$!-":
                out.expanded(marker("$" + text[i + 1]), quoted)
                return i + 2
            out.literal("$")
            return i + 1
        return end

    def _parameter(self, match: re.Match[str]) -> str:
        name, index, op = match.group("name"), match.group("index"), match.group("op")
        word = match.group("word") or ""
        value: str | None
        if index and name in self.arrays:
            items = self.arrays[name]
            if index in ("[@]", "[*]"):
                value = " ".join(items)
            else:
                k = int(index[1:-1])
                value = items[k] if k < len(items) else ""
        elif index and name in self.scalars:
            value = self.scalars[name] if index in ("[0]", "[@]", "[*]") else ""
        else:
            value = None if name.isdigit() else self.value(name)
        if op is None:
            return marker(name) if value is None else value
        empty = value is None or (op.startswith(":") and value == "")
        if op.endswith("+"):
            if value is None and not op.startswith(":"):
                return marker(name)  # set in the environment or not: unknown
            return "" if empty else self.string(word)
        if not empty:
            return value  # type: ignore[return-value]
        default = self.string(word)
        if op.endswith("=") and not name.isdigit():
            self.scalars[name] = default
        return default

    def _arithmetic(self, expr: str) -> str:
        text = self.string(expr)
        if UNRESOLVED in text:
            return marker(f"$(({expr.strip()}))")

        def bare(match: re.Match[str]) -> str:
            value = self.value(match.group(0))
            return value if value not in (None, "") else "0"  # bash: an unset name is 0

        try:
            text = re.sub(_NAME, bare, text)
            if UNRESOLVED in text:
                raise ValueError("unresolved")
            return str(_arith(ast.parse(text.strip(), mode="eval")))
        except ShellError:
            raise
        except ValueError as err:
            if str(err) == "division by zero":  # bash stops the script: "division by 0 (error token is ...)"
                raise ShellError(f"$(({expr.strip()})): division by 0, which bash refuses") from None
            return marker(f"$(({expr.strip()}))")
        except (SyntaxError, TypeError, RecursionError, OverflowError, MemoryError):
            return marker(f"$(({expr.strip()}))")


# conditions ------------------------------------------------------------------------------------------
_INT_OPS: dict[str, Callable[[int, int], bool]] = {
    "-eq": operator.eq, "-ne": operator.ne, "-gt": operator.gt, "-ge": operator.ge, "-lt": operator.lt,
    "-le": operator.le,
}


def _simple_test(args: list[str]) -> bool | None:
    if args and args[0] == "!":
        inner = _simple_test(args[1:])
        return None if inner is None else not inner
    if any(UNRESOLVED in a for a in args):
        return None
    if not args:
        return False
    if len(args) == 1:
        return args[0] != ""
    if len(args) == 2:
        op, value = args
        if op == "-z":
            return value == ""
        if op == "-n":
            return value != ""
        return None  # file tests and the like
    if len(args) == 3:
        left, op, right = args
        if op in ("=", "=="):
            return fnmatch.fnmatchcase(left, right) if any(c in right for c in "*?[") else left == right
        if op == "!=":
            return not (fnmatch.fnmatchcase(left, right) if any(c in right for c in "*?[") else left == right)
        if op in _INT_OPS:
            try:
                return _INT_OPS[op](int(left), int(right))
            except ValueError:
                return None
    return None


def evaluate_condition(words: list[str]) -> bool | None:
    """An `if` test (its words, expanded): True, False, or None when planner cannot tell."""
    if words and words[0] in ("true", ":"):
        return True if len(words) == 1 else None
    if words and words[0] == "false":
        return False if len(words) == 1 else None
    result: bool | None = None
    pending = ""
    group: list[str] = []
    parts: list[tuple[str, list[str]]] = []
    for word in words + ["&&"]:
        if word in ("[", "[[", "test"):
            continue
        if word in ("]", "]]"):
            continue
        if word in ("&&", "||", "-a", "-o"):
            parts.append((pending, group))
            pending, group = ("&&" if word in ("&&", "-a") else "||"), []
            continue
        group.append(word)
    first = True
    for connector, args in parts:
        if not args and not first:
            return None
        value = _simple_test(args)
        if first:
            result, first = value, False
        elif connector == "&&":
            result = False if result is False or value is False else (None if None in (result, value) else True)
        else:
            result = True if result is True or value is True else (None if None in (result, value) else False)
    return result


# the script ------------------------------------------------------------------------------------------
@dataclass
class _Branch:
    line: int
    condition: str
    active: bool | None  # None: planner cannot tell, so it reads every branch
    done: bool = False  # a branch before this one ran
    unknown: bool = False


@dataclass
class Script:
    """What running a launch script would do: its variables and the commands it runs, expanded."""

    commands: list[tuple[int, list[str]]] = field(default_factory=list)
    variables: Variables = field(default_factory=Variables)
    uncertain_effects: dict[int, str] = field(default_factory=dict)  # if-line -> its condition
    line: int = 0  # the statement being run


def run_script(text: str, source: str) -> Script:
    """Walk the script's statements, keeping variables and the (expanded) commands; a PlannerError naming the
    line where bash would reject the script or where an expansion passes planner's limits."""
    script = Script()
    try:
        _run_script(text, script)
    except ShellError as err:
        raise PlannerError(f"line {err.line or script.line}: {err.message}", source=source) from None
    return script


def _run_script(text: str, script: Script) -> None:
    var = script.variables
    stack: list[_Branch] = []

    def running() -> bool:
        return all(b.active is not False for b in stack)

    def note_effect() -> None:
        for branch in stack:
            if branch.active is None:
                script.uncertain_effects.setdefault(branch.line, branch.condition)

    for line, stmt in statements(text):
        script.line = line
        words = stmt.split(None, 1)
        head = words[0]
        rest = words[1] if len(words) > 1 else ""
        if head in _KEYWORDS_PASS and head != "else":
            if not rest:
                continue
            stmt, words = rest, rest.split(None, 1)
            head, rest = words[0], (words[1] if len(words) > 1 else "")
        if head in ("if", "elif"):
            condition = rest
            value = evaluate_condition(var.words(condition)) if running() or head == "elif" else False
            if head == "if":
                branch = _Branch(line, condition, value if running() else False)
                branch.unknown = value is None and running()
                branch.done = value is True
                stack.append(branch)
            elif stack:
                top = stack[-1]
                if top.unknown:
                    top.active = None
                elif top.done or not all(b.active is not False for b in stack[:-1]):
                    top.active = False
                else:
                    top.active = value
                    top.unknown = value is None
                    top.done = value is True
                top.line, top.condition = line, condition
            continue
        if head == "else":
            if stack:
                top = stack[-1]
                top.active = None if top.unknown else (not top.done and all(b.active is not False
                                                                             for b in stack[:-1]))
            if rest:
                stmt = rest
                head = rest.split(None, 1)[0]
            else:
                continue
        if head == "fi":
            if stack:
                stack.pop()
            continue
        if not running():
            continue
        if _assign(stmt, var):
            note_effect()
            continue
        tokens = var.words(stmt)
        if tokens and tokens[0] == "eval":  # eval parses its words again: their operators redirect and pipe
            tokens = [str(t) for t in tokens]
        if tokens:
            script.commands.append((line, tokens))
            if script_index(tokens) is not None:
                note_effect()


_DECLARE = frozenset({"export", "declare", "local", "readonly", "typeset"})
_ARRAY = re.compile(rf"^(?:(?:export|declare|local|readonly|typeset)\s+(?:-\w+\s+)*)?({_NAME})(\+?)=\((.*)\)\s*$", re.S)
_SCALAR = re.compile(rf"^({_NAME})(\+?)=(.*)$", re.S)


def _assign(stmt: str, var: Variables) -> bool:
    """Apply `stmt` when it only assigns variables (`NAME=value`, `NAME+=( ... )`, `export A=1 B=2`)."""
    array = _ARRAY.match(stmt)
    if array:
        name, append, body = array.groups()
        items = var.words(body)
        if append:
            items = var.arrays.get(name, [var.scalars[name]] if name in var.scalars else []) + items
        if len(items) > MAX_SHELL_WORDS:
            raise ShellError(f"array {name} holds more than {MAX_SHELL_WORDS:,} words (planner's limit for a launch "
                             "script; see docs/errors.md)")
        var.arrays[name] = items
        var.scalars.pop(name, None)
        return True
    spans = word_spans(stmt)
    if spans and spans[0] in _DECLARE:
        spans = [w for w in spans[1:] if not w.startswith("-")]
        if not all(_SCALAR.match(w) for w in spans):
            return True  # `export NAME`: nothing planner reads changes
    matches = [_SCALAR.match(w) for w in spans]
    if not spans or not all(matches):
        return False  # a command (perhaps with NAME=value environment prefixes)
    for match in matches:
        assert match is not None
        name, append, text = match.groups()
        value = var.string(text)
        if append:
            value = (var.value(name) or "") + value
        if len(value) > MAX_SHELL_EXPANSION_CHARS:
            raise ShellError(f"variable {name} holds more than {MAX_SHELL_EXPANSION_CHARS:,} characters (planner's "
                             "limit for a launch script; see docs/errors.md)")
        var.scalars[name] = value
        var.arrays.pop(name, None)
    return True


def script_index(tokens: list[str]) -> int | None:
    """Position of the Python training script in a command (`torchrun ... pretrain_gpt.py ARGS`)."""
    if tokens and tokens[0] in _NOT_LAUNCHERS:
        return None
    for i, tok in enumerate(tokens):
        # the script's own name must be known; a directory from the environment (`$(pwd)/pretrain_gpt.py`,
        # `$MEGATRON/pretrain_gpt.py`, BLOOM's launcher) is not needed
        name = tok.rsplit(UNRESOLVED, 1)[-1] if tok.rsplit(UNRESOLVED, 1)[-1].startswith("/") else tok
        if name.endswith(".py") and not tok.startswith("-") and UNRESOLVED not in name and not _HAS_BLANK(name):
            return i
    return None


_NOT_LAUNCHERS = frozenset({"echo", "printf", "cat", "ls", "test", "[", "[[", "cp", "mv", "rm", "mkdir", "wget",
                            "curl", "git", "cd", "export", "source", "."})
_HAS_BLANK = re.compile(r"\s").search


def _inner_command(tokens: list[str]) -> list[str] | None:
    """`bash -c "torchrun ... train.py ARGS"` / `srun ... sh -c '...'`: the words of the quoted command."""
    for i, tok in enumerate(tokens[:-1]):
        if tok == "-c" and i > 0 and tokens[i - 1].rsplit("/", 1)[-1] in ("bash", "sh", "zsh"):
            inner = tokens[i + 1].split()
            if script_index(inner) is not None:
                return inner
    return None


_REDIRECTION = re.compile(r"^(?:\d*>>?|&>>?|\d*<|\||\|\||&&|&)(?:&\d+)?")


def before_redirection(tokens: list[str]) -> list[str]:
    """The command's arguments up to a redirection or pipe (`&> log`, `2>&1 | tee x`, `> out`), which bash
    does not pass to the program (Megatron-DeepSpeed's examples end their launch with `&> ${LOG}`)."""
    for i, tok in enumerate(tokens):
        if not isinstance(tok, QuotedWord) and _REDIRECTION.match(tok):
            return tokens[:i]
    return tokens


def _string_launches(values: Iterable[str]) -> list[list[str]]:
    """Python-script commands held in string variables, as a script builds them for `srun bash -c "$CMD"`
    (NVIDIA/Megatron-LM examples/megatron_fsdp/sbatch_mfsdp_deepseek_v3.sh: TRAINING_CMD="...; python
    pretrain_gpt.py ${PRETRAIN_ARGS[@]}"): each `;`- or line-separated command of each string, split as the
    inner shell splits it."""
    import shlex

    found: list[list[str]] = []
    for value in values:
        for piece in re.split(r"[;\n]", value):
            try:
                tokens = shlex.split(piece)
            except ValueError:
                continue
            if tokens and script_index(tokens) is not None:
                found.append(tokens)
    return found


def launch_flags(text: str, source: str) -> tuple[list[str], list[str]]:
    """The arguments a launch script (or an arguments file) passes to its training script, and warnings
    (`launch`, without the environment)."""
    flags, warnings, _ = launch(text, source)
    return flags, warnings


def launch(text: str, source: str) -> tuple[list[str], list[str], dict[str, str]]:
    """The arguments a launch script (or an arguments file) passes to its training script, warnings, and the
    environment it sets for it: the script's scalar variables (`NAME=value`, `export NAME=value`) with the
    launch command's own `NAME=value` prefixes over them.

    When a command runs a Python script (`torchrun ... pretrain_gpt.py ARGS`), the arguments after the
    script in the last such command are taken (preferring a script whose name has 'train' in it);
    otherwise every command's words are (an arguments file), or, when the file only defines arrays,
    their items in order."""
    script = run_script(text, source)
    launches: list[list[str]] = []
    for _, tokens in script.commands:
        inner = _inner_command(tokens)
        if inner is not None:
            tokens = inner
        if script_index(tokens) is not None:
            launches.append(tokens)
    if not launches:
        launches = _string_launches(script.variables.scalars.values())
    training = [t for t in launches if "train" in t[script_index(t)].rsplit("/", 1)[-1]]  # type: ignore[index]
    chosen = (training or launches)[-1:] if launches else []
    environment = dict(script.variables.scalars)
    if chosen:
        tokens = chosen[0]
        flags = before_redirection(tokens[script_index(tokens) + 1 :])  # type: ignore[operator]
        for word in tokens[: script_index(tokens)]:
            prefix = _SCALAR.match(word)
            if prefix is not None and not prefix.group(2):
                environment[prefix.group(1)] = prefix.group(3)
    elif script.commands:
        flags = [tok for _, tokens in script.commands for tok in tokens]
    else:  # a file that only defines its flags: arrays, and strings of flags (MODEL_ARGS="--a 1 --b")
        flags = [tok for items in script.variables.arrays.values() for tok in items]
        flags += [tok for value in script.variables.scalars.values() if value.lstrip().startswith("--")
                  for tok in value.split()]
    warnings = [f"{source}: line {line}: planner cannot tell whether `if {cond}` holds, so it read every branch "
                "(the last value of a variable wins); check the flags it read, or give them with --engine-args"
                for line, cond in sorted(script.uncertain_effects.items())]
    return flags, warnings, environment
