"""Rendering: template + lead → subject, text part, HTML part. A pure function of its inputs.

Jinja2 files ``<name>.txt.j2`` and ``<name>.html.j2``, ``StrictUndefined``, HTML autoescaped;
both parts show the unsubscribe link (Gmail and Yahoo sender guidelines). Everything is compiled
in one sandbox (:func:`environment`, issue 31): only :data:`FILTERS`, :data:`STR_METHODS` and
:data:`MAPPING_METHODS`, and caps checked before a value is built. A breach raises
:class:`RenderError` for that row or campaign load, never the batch. docs/reference/templates.md."""

from __future__ import annotations

import contextvars
import functools
import html
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import jinja2.filters
import jinja2.runtime
import jinja2.sandbox
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.defaults import DEFAULT_FILTERS

from outreach.paths import templates_dir

MAX_PART_CHARS = 1_000_000
"""Characters one rendered part (subject, text or HTML) may have; a longer one fails the row."""
MAX_VALUE_CHARS = MAX_PART_CHARS
"""Characters (or list items) one value built inside a template may have (``'a' * n``, a
``join``, a ``~`` concatenation…); refused before it is built where its size can be known."""
MAX_WORK_CHARS = 8 * MAX_PART_CHARS
"""Characters all values and output built while rendering one email may add up to."""
MAX_LOOP_ITERATIONS = 100_000
"""``{% for %}`` iterations one email's rendering may run, all loops together."""
MAX_RANGE = 10_000
"""Items ``range()`` may produce in a template."""
MAX_INT_BITS = 4096
"""Bits an integer built with ``*`` or ``**`` may have (about 1,233 decimal digits)."""
MAX_INT_ARGUMENT = 10_000
"""Largest integer a template may pass to a method or filter (a width, a count)."""
RENDER_SECONDS = 2.0
"""Wall seconds rendering one email (all its parts) may take."""


class RenderError(ValueError):
    """A template could not be rendered for this lead; the message says which and why."""


class TemplateLimit(jinja2.exceptions.SecurityError):
    """A template broke a cap or used what the sandbox does not offer (see the module docstring)."""


@dataclass(frozen=True)
class Rendered:
    """A rendered email: one-line ``subject``, ``text`` and ``html`` bodies."""

    subject: str
    text: str
    html: str


class _Budget:
    """What one email's rendering may still spend: characters built, loop iterations, time."""

    def __init__(self) -> None:
        self.chars = MAX_WORK_CHARS
        self.iterations = MAX_LOOP_ITERATIONS
        self.deadline = time.monotonic() + RENDER_SECONDS

    def clock(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateLimit(f"rendering took longer than {RENDER_SECONDS:g} s (RENDER_SECONDS)")

    def charge(self, size: int, what: str) -> None:
        if size > MAX_VALUE_CHARS:
            raise TemplateLimit(f"{what} would build {size:,} characters (at most "
                                f"{MAX_VALUE_CHARS:,}: MAX_VALUE_CHARS)")
        self.chars -= size
        if self.chars < 0:
            raise TemplateLimit(f"the template builds more than {MAX_WORK_CHARS:,} characters "
                                "in all for one email (MAX_WORK_CHARS)")
        self.clock()

    def tick(self) -> None:
        self.iterations -= 1
        if self.iterations < 0:
            raise TemplateLimit(f"more than {MAX_LOOP_ITERATIONS:,} loop iterations for one "
                                "email (MAX_LOOP_ITERATIONS)")
        self.clock()


_budget: contextvars.ContextVar[_Budget] = contextvars.ContextVar("outreach_render_budget")


def _current() -> _Budget:
    """The budget of the email being rendered (one is started when a template renders outside
    :func:`render`, so the caps hold there too)."""
    try:
        return _budget.get()
    except LookupError:
        budget = _Budget()
        _budget.set(budget)
        return budget


def _size(value: Any) -> int | None:
    """Characters of a string, items of a list or tuple; ``None`` for anything else."""
    return len(value) if isinstance(value, (str, list, tuple)) else None


def _check_int(value: Any, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT_ARGUMENT:
        raise TemplateLimit(f"{what}: the number {value} is larger than {MAX_INT_ARGUMENT:,} "
                            "(MAX_INT_ARGUMENT)")


def _int_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise TemplateLimit(f"an integer of more than {MAX_INT_BITS} bits (MAX_INT_BITS)")


def _joined_size(sep: str, items: list[Any]) -> int:
    return sum(len(x) if isinstance(x, str) else len(str(x)) for x in items) + len(sep) * max(len(items) - 1, 0)


def _replaced_size(s: str, old: str, new: str, count: int | None) -> int:
    found = len(s) + 1 if old == "" else s.count(old)
    if count is not None and count >= 0:
        found = min(found, count)
    return len(s) + found * (len(new) - len(old))


def _safe_range(*args: int) -> range:  # the template global range()
    r = range(*args)  # lazy: its length is known without building it
    if len(r) > MAX_RANGE:
        raise TemplateLimit(f"range() of {len(r):,} items (at most {MAX_RANGE:,}: MAX_RANGE)")
    return r


def _guard_filter(name: str, f: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a built-in filter: integer arguments capped, the result charged to the budget."""

    @functools.wraps(f)  # keeps jinja_pass_arg: Jinja passes the same first argument
    def guarded(*args: Any, **kwargs: Any) -> Any:
        for a in (*args, *kwargs.values()):
            _check_int(a, f"filter {name}")
        out = f(*args, **kwargs)
        if (n := _size(out)) is not None:
            _current().charge(n, f"filter {name}")
        if isinstance(out, int) and not isinstance(out, bool):
            _int_bits(out.bit_length())  # int('ff…ff', 16) builds any size in linear time
        return out

    return guarded


@jinja2.pass_eval_context
def _join(eval_ctx: Any, value: Iterable[Any], d: str = "", attribute: str | int | None = None) -> str:
    if attribute is not None:
        value = map(jinja2.filters.make_attrgetter(eval_ctx.environment, attribute), value)
    items = []
    for item in value:  # a generator is bounded by the loop and range caps
        _current().tick()
        items.append(item)
    _current().charge(_joined_size(str(d), items), "filter join")
    out: str = DEFAULT_FILTERS["join"](eval_ctx, items, d)
    return out


@jinja2.pass_eval_context
def _replace(eval_ctx: Any, s: str, old: str, new: str, count: int | None = None) -> str:
    _current().charge(_replaced_size(str(s), str(old), str(new), count), "filter replace")
    out: str = DEFAULT_FILTERS["replace"](eval_ctx, s, old, new, count)
    return out


FILTERS: dict[str, Callable[..., Any]] = {
    **{name: _guard_filter(name, DEFAULT_FILTERS[name]) for name in (
        "abs", "capitalize", "count", "d", "default", "e", "escape", "first", "float", "int",
        "last", "length", "list", "lower", "round", "string", "striptags", "title", "trim",
        "truncate", "upper", "urlencode", "wordcount")},
    "join": _join,
    "replace": _replace,
}
"""The filters templates may use (Jinja's built-ins of the same name, capped). Left out on
purpose: ``safe`` and ``forceescape`` (lead data must never become markup), ``format``, ``center``,
``indent``, ``wordwrap``, ``filesizeformat``, ``xmlattr``, ``tojson``, ``pprint``, ``attr``,
``map``/``select``/``reject`` and the other higher-order filters (they reach attributes or build
unbounded text without passing the caps)."""

STR_METHODS = frozenset({
    "capitalize", "casefold", "count", "endswith", "find", "isalnum", "isalpha", "isdigit",
    "islower", "isspace", "istitle", "isupper", "join", "lower", "lstrip", "partition",
    "removeprefix", "removesuffix", "replace", "rfind", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "upper"})
"""String methods templates may call (``lead.company.upper()``); ``format``, ``ljust``, ``zfill``,
``expandtabs``… are not among them."""
MAPPING_METHODS = frozenset({"get", "items", "keys", "values"})
"""Methods of ``lead``, ``lead.custom``, ``sender``… (dicts) templates may call."""


class _SandboxCodeGenerator(CodeGenerator):
    """Jinja's code generator with the budget hooks compiled in: every piece of output and every
    ``~`` concatenation is charged, every loop iteration ticks; macros, call blocks and recursive
    loops are refused (they are the only way a template recurses)."""

    def _output_const_repr(self, group: Iterable[Any]) -> str:
        return f"environment.outreach_out({super()._output_const_repr(group)})"

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        self.write("environment.outreach_out(")
        super()._output_child_pre(node, frame, finalize)

    def _output_child_post(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        super()._output_child_post(node, frame, finalize)
        self.write(")")

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.outreach_concat(")
        super().visit_Concat(node, frame)
        self.write(")")

    def visit_For(self, node: nodes.For, frame: Frame) -> None:
        if node.recursive:
            self.fail("recursive loops are not available in outreach templates", node.lineno)
        node.iter = nodes.Call(nodes.EnvironmentAttribute("outreach_loop"), [node.iter], [],
                               None, None, lineno=node.lineno)
        super().visit_For(node, frame)

    def visit_Include(self, node: nodes.Include, frame: Frame) -> None:
        self._literal_name(node, "include")
        super().visit_Include(node, frame)

    def visit_Extends(self, node: nodes.Extends, frame: Frame) -> None:
        self._literal_name(node, "extends")
        super().visit_Extends(node, frame)

    def visit_Import(self, node: nodes.Import, frame: Frame) -> None:
        self._literal_name(node, "import")
        super().visit_Import(node, frame)

    def visit_FromImport(self, node: nodes.FromImport, frame: Frame) -> None:
        self._literal_name(node, "from … import")
        super().visit_FromImport(node, frame)

    def _literal_name(self, node: nodes.Include | nodes.Extends | nodes.Import | nodes.FromImport,
                      tag: str) -> None:
        # A name computed from data (lead fields) would let data choose a file.
        if not isinstance(node.template, nodes.Const):
            self.fail(f"{{% {tag} %}} must name its template as a literal string", node.lineno)

    def visit_Macro(self, node: nodes.Macro, frame: Frame) -> None:
        self.fail("{% macro %} is not available in outreach templates", node.lineno)

    def visit_CallBlock(self, node: nodes.CallBlock, frame: Frame) -> None:
        self.fail("{% call %} is not available in outreach templates", node.lineno)


class OutreachSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The one environment templates and subjects are compiled in (see the module docstring)."""

    code_generator_class = _SandboxCodeGenerator
    intercepted_binops = frozenset({"*", "**", "%", "+", "-", "/", "//"})

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.filters = dict(FILTERS)
        self.globals = {"range": _safe_range}

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        """Jinja's immutable sandbox rule, and of strings and dicts only the methods of
        :data:`STR_METHODS` and :data:`MAPPING_METHODS` (dict keys are items, not attributes)."""
        if not super().is_safe_attribute(obj, attr, value):
            return False
        if isinstance(obj, str):
            return attr in STR_METHODS
        if isinstance(obj, dict):
            return attr in MAPPING_METHODS
        return True

    def wrap_str_format(self, value: Any) -> None:
        """``str.format`` is not offered at all (a width such as ``{:>99999999}`` builds any size)."""
        return None

    def call_binop(self, context: jinja2.runtime.Context, operator_: str, left: Any,
                   right: Any) -> Any:
        """``*`` and ``+`` of strings and lists are sized before they are built; ``*`` and
        ``**`` of integers are held to :data:`MAX_INT_BITS`, and so is every integer operand of
        any arithmetic (``//`` and ``%`` of huge integers take seconds); ``%``-formatting of a
        string is refused (its width can build any size)."""
        budget = _current()
        for operand in (left, right):
            if isinstance(operand, int) and not isinstance(operand, bool):
                _int_bits(operand.bit_length())
        if operator_ == "%" and isinstance(left, str):
            raise TemplateLimit("'%' string formatting is not available in outreach templates")
        if operator_ == "*":
            for seq, n in ((left, right), (right, left)):
                if _size(seq) is not None and isinstance(n, int):
                    budget.charge(_size(seq) * max(n, 0), "'*'")  # type: ignore[operator]
            if isinstance(left, int) and isinstance(right, int):
                _int_bits(left.bit_length() + right.bit_length() - 1)
        elif operator_ == "**" and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left) > 1:
                _int_bits(right * (abs(left).bit_length() - 1) + 1)
        elif operator_ == "+" and _size(left) is not None and _size(right) is not None:
            budget.charge(_size(left) + _size(right), "'+'")  # type: ignore[operator]
        return self.binop_table[operator_](left, right)

    def call(__self, __context: jinja2.runtime.Context, __obj: Any,
             *args: Any, **kwargs: Any) -> Any:
        """Jinja's sandboxed call, with integer arguments capped, ``join`` and ``replace``
        sized first and every string or list result charged to the budget."""
        if isinstance(__obj, jinja2.Undefined):  # an unknown or refused name: say that
            return super().call(__context, __obj, *args, **kwargs)
        budget = _current()
        owner = getattr(__obj, "__self__", None)
        name = getattr(__obj, "__name__", "")
        for a in (*args, *kwargs.values()) if __obj is not _safe_range else ():  # its own cap
            _check_int(a, f"{name or 'call'}()")
        if isinstance(owner, str) and name == "join" and args:
            items = []
            for item in args[0]:
                budget.tick()
                items.append(item)
            budget.charge(_joined_size(owner, items), "join()")
            args = (items, *args[1:])
        elif isinstance(owner, str) and name == "replace" and len(args) >= 2:
            budget.charge(_replaced_size(owner, str(args[0]), str(args[1]),
                                         args[2] if len(args) > 2 else kwargs.get("count")),
                          "replace()")
        out = super().call(__context, __obj, *args, **kwargs)
        if (n := _size(out)) is not None:
            budget.charge(n, f"{name or 'call'}()")
        return out

    # Called by the compiled template (see _SandboxCodeGenerator).

    def outreach_out(self, piece: Any) -> Any:
        """Charge one piece of output (also inside ``{% set %}`` and ``{% filter %}`` blocks)."""
        _current().charge(len(piece), "the output")
        return piece

    def outreach_concat(self, joined: str) -> str:
        """Charge the result of one ``~`` concatenation (its parts were already charged)."""
        _current().charge(len(joined), "'~'")
        return joined

    def outreach_loop(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Tick the budget once per ``{% for %}`` iteration."""
        budget = _current()
        for item in iterable:
            budget.tick()
            yield item


@functools.cache
def environment(directory: Path) -> OutreachSandbox:
    """Return the sandboxed environment for the templates in ``directory`` (cached per folder):
    the one every template and subject is compiled in, previews included."""
    return OutreachSandbox(
        loader=jinja2.FileSystemLoader(str(directory)),
        undefined=jinja2.StrictUndefined,
        autoescape=jinja2.select_autoescape(enabled_extensions=("html.j2", "html"),
                                            default_for_string=False),  # subjects are text
        keep_trailing_newline=True,
    )



@functools.lru_cache(maxsize=256)
def _subject_template(directory: Path, subject: str) -> jinja2.Template:
    # Compiled once per (folder, subject), as the environment caches file templates: a batch
    # renders the same step subject for every row.
    return environment(directory).from_string(subject)


def _render_part(template: jinja2.Template, context: dict[str, Any], part: str) -> str:
    """Render one part, streamed: it stops as soon as it passes :data:`MAX_PART_CHARS`."""
    pieces: list[str] = []
    size = 0
    for piece in template.generate(context):
        size += len(piece)
        if size > MAX_PART_CHARS:
            raise TemplateLimit(f"the {part} renders more than {MAX_PART_CHARS:,} characters "
                                "(MAX_PART_CHARS)")
        pieces.append(piece)
    return "".join(pieces)


def render_subject(subject: str, context: dict[str, Any], directory: Path | None = None) -> str:
    """Render one step's subject alone, as :func:`render` renders it (the sandbox, a budget of
    its own, white space folded to single spaces): the import checks each step's Subject for a
    row with it (:func:`outreach.message.lead_header_problem`).

    :raises RenderError: as :func:`render` for the subject.
    """
    directory = directory or templates_dir()
    token = _budget.set(_Budget())
    try:
        return " ".join(_render_part(_subject_template(directory, subject), context,
                                     "subject").split())
    except jinja2.TemplateError as exc:
        raise RenderError(f"subject {subject!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a filter or expression failing for this lead's data
        raise RenderError(f"subject {subject!r}: {type(exc).__name__}: {exc}") from None
    finally:
        _budget.reset(token)


def render(template: str, subject: str | None, context: dict[str, Any],
           directory: Path | None = None, *, require_unsubscribe: bool = True) -> Rendered:
    """Render one email in the sandbox, with a new budget per call.

    :param template: template name (``intro`` → ``intro.txt.j2`` + ``intro.html.j2``).
    :param subject: the step's subject (Jinja2), or ``None`` for the template's ``.subject.j2``;
        white space (CR/LF too) folded to one space.
    :param context: marketing: ``lead``, ``sender``, ``campaign``, ``unsubscribe_url``;
        transactional: what was enqueued plus ``recipient`` and ``sender``.
    :param require_unsubscribe: both parts must show ``context["unsubscribe_url"]`` (marketing).
    :raises RenderError: a missing template or variable, a template error, the sandbox or a cap
        (the template and rule named), or a part without the unsubscribe link."""
    directory = directory or templates_dir()
    env = environment(directory)
    token = _budget.set(_Budget())
    part = "subject"
    try:
        raw_subject = _render_part(_subject_template(directory, subject) if subject is not None
                                   else env.get_template(f"{template}.subject.j2"), context, part)
        subject_out = " ".join(raw_subject.split())
        part = "text part"
        text = _render_part(env.get_template(f"{template}.txt.j2"), context, part)
        part = "HTML part"
        html_out = _render_part(env.get_template(f"{template}.html.j2"), context, part)
    except jinja2.TemplateNotFound as exc:
        raise RenderError(f"template file not found: {exc.name}") from None
    except jinja2.UndefinedError as exc:
        raise RenderError(f"template {template!r} ({part}): {exc.message}") from None
    except jinja2.exceptions.SecurityError as exc:
        raise RenderError(f"template {template!r} ({part}): refused by the sandbox: {exc}") from None
    except jinja2.TemplateError as exc:
        raise RenderError(f"template {template!r} ({part}): {exc}") from None
    except Exception as exc:  # noqa: BLE001 - a filter or expression failing for this lead's data
        raise RenderError(f"template {template!r} ({part}): {type(exc).__name__}: {exc}") from None
    finally:
        _budget.reset(token)
    if not subject_out:
        raise RenderError(f"template {template!r}: the subject renders empty")
    if not require_unsubscribe:
        return Rendered(subject_out, text, html_out)
    url = context["unsubscribe_url"]
    if url not in text:
        raise RenderError(f"template {template!r}: the text part must show {{{{ unsubscribe_url }}}}")
    if url not in html_out and html.escape(url) not in html_out:
        raise RenderError(f"template {template!r}: the HTML part must show {{{{ unsubscribe_url }}}}")
    return Rendered(subject_out, text, html_out)
