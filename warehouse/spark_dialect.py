"""DuckDB's SQL in Spark's dialect: sqlglot's transpilation, and the systematic dialect differences it leaves.

`to_spark_sql` writes one DuckDB statement for Spark; `_spark_transforms` fixes, node by node, what sqlglot
does not translate by itself (each transform says what it fixes); nothing here is view-specific.
warehouse.spark builds the catalogue on Spark with it.
"""

from __future__ import annotations

import functools

import sqlglot
from sqlglot import exp
from sqlglot.dialects.duckdb import DuckDB

# --- DuckDB -> Spark: systematic dialect differences that sqlglot leaves as they are -----------------


class DuckDBAsWritten(DuckDB):
    """DuckDB's dialect, but list indexes kept as written (1-based) in the parsed tree.

    sqlglot's DuckDB parser turns `x[1]` into a 0-based index only where it can type the index as an
    integer at parse time: literals yes (and -1 wrongly into -2: DuckDB's last element), `x[g[5]]` or
    `x[i + 1]` not; Spark's writer then prints the tree's index as it stands, so a computed index came
    out one place too far. Parsed with this dialect every index is DuckDB's own, and `_spark_transforms`
    writes each one as Spark's 1-based `try_element_at` (negative: from the end; out of range: NULL,
    as in DuckDB). Statements handed to `to_spark_sql` as trees must be parsed with it.
    """

    INDEX_OFFSET = 0


READ_DIALECT = DuckDBAsWritten

# Window functions that take no frame: DuckDB ignores a frame given to them, Spark refuses it
_FRAMELESS = (
    exp.Lead,
    exp.Lag,
    exp.RowNumber,
    exp.Rank,
    exp.DenseRank,
    exp.Ntile,
    exp.PercentRank,
    exp.CumeDist,
)


def _inline_frameless_windows(select: exp.Select) -> None:
    """`lead(t) OVER w ... WINDOW w AS (... ROWS ...)`: give lead/lag/row_number their own OVER, frameless."""
    named = {w.this.name: w for w in select.args["windows"]}
    for window in select.find_all(exp.Window):
        ref = window.args.get("alias")
        definition = named.get(ref.name) if isinstance(ref, exp.Identifier) else None
        if definition is None or not isinstance(window.this, _FRAMELESS) or not definition.args.get("spec"):
            continue
        if window.parent_select is not select:
            continue
        window.set("alias", None)
        window.set("partition_by", [e.copy() for e in definition.args.get("partition_by") or []])
        window.set("order", definition.args["order"].copy() if definition.args.get("order") else None)


def _fn(name: str, *args: exp.Expression) -> exp.Anonymous:
    return exp.Anonymous(this=name, expressions=list(args))


def _lambda(body: exp.Expression, *names: str) -> exp.Lambda:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(n) for n in names])


def _var(name: str) -> exp.Identifier:
    return exp.to_identifier(name)


def _int_literal(node: exp.Expression) -> int | None:
    """The value of an integer literal (`3`, `-1`), else None."""
    if isinstance(node, exp.Literal) and not node.is_string and node.name.lstrip("-").isdigit():
        return int(node.name)
    if isinstance(node, exp.Neg) and _int_literal(node.this) is not None:
        return -_int_literal(node.this)
    return None


def _list_element(xs: exp.Expression, index: exp.Expression) -> exp.Expression:
    """DuckDB's `xs[i]` (1-based; negative from the end; 0 or out of range: NULL) in Spark."""
    value = _int_literal(index)
    if value == 0:
        return exp.null()
    if value is None:  # Spark refuses index 0 and a BIGINT index: DuckDB's NULL for 0, as INT
        index = exp.Cast(this=_fn("nullif", index, exp.Literal.number(0)), to=exp.DataType.build("INT"))
    return _fn("try_element_at", xs, index)


def _list_slice(xs: exp.Expression, piece: exp.Slice) -> exp.Expression:
    """DuckDB's `xs[a:b]` (1-based, both ends included, negative from the end, clamped) as Spark's slice."""
    if piece.args.get("step") is not None:
        raise ValueError(f"{piece.sql(READ_DIALECT)}: a list slice with a step has no Spark form here")
    size = _fn("size", xs.copy())

    def position(bound: exp.Expression | None, default: exp.Expression) -> exp.Expression:
        if bound is None:
            return default
        value = _int_literal(bound)
        from_end = exp.Add(
            this=exp.Add(this=size.copy(), expression=bound.copy()), expression=exp.Literal.number(1)
        )
        if value is not None:
            return exp.Literal.number(value) if value >= 0 else from_end
        return exp.Case(
            ifs=[exp.If(this=exp.LT(this=bound.copy(), expression=exp.Literal.number(0)), true=from_end)],
            default=bound.copy(),
        )

    first = _int_literal(piece.this) if piece.this is not None else 1
    begin = (
        exp.Literal.number(max(first, 1))
        if first is not None and first >= 0
        else _fn("greatest", position(piece.this, exp.Literal.number(1)), exp.Literal.number(1))
    )
    end = position(piece.expression, size.copy())
    length = _fn(
        "greatest",
        exp.Add(this=exp.Sub(this=end, expression=begin.copy()), expression=exp.Literal.number(1)),
        exp.Literal.number(0),
    )
    return _fn("slice", xs, begin, length)


def _list_fold(xs: exp.Expression, combine: type[exp.Binary]) -> exp.Expression:
    """DuckDB's list_sum / list_bool_and ... : the aggregate over the non-NULL elements, NULL when none."""
    kept = _fn(
        "filter", xs, _lambda(exp.Not(this=exp.Is(this=_var("_th_v"), expression=exp.null())), "_th_v")
    )
    rest = _fn("slice", kept.copy(), exp.Literal.number(2), _fn("size", kept.copy()))
    first = _fn("try_element_at", kept.copy(), exp.Literal.number(1))
    return _fn(
        "aggregate",
        rest,
        first,
        _lambda(combine(this=_var("_th_a"), expression=_var("_th_b")), "_th_a", "_th_b"),
    )


_LIST_FOLDS = {"list_sum": exp.Add, "list_bool_and": exp.And, "list_bool_or": exp.Or}


def _zip_transform(node: exp.Transform) -> exp.Expression:
    """`list_transform(list_zip(a, b), lambda x: f(x[1], x[2]))` -> Spark's `zip_with(a, b, (x1, x2) -> f)`.

    Both pad the shorter list with NULLs (DuckDB zips a NULL list as an empty one). Spark's arrays_zip gives structs named after the columns, which
    `x[1]` cannot read: any other use of the zipped element is refused."""
    zipped, fn = node.this, node.expression
    if len(zipped.expressions) != 2 or not isinstance(fn, exp.Lambda) or len(fn.expressions) != 1:
        raise ValueError(
            f"{node.sql(READ_DIALECT)}: only list_transform(list_zip(a, b), lambda x: ... x[1] ... x[2]) "
            "has a Spark form (zip_with)"
        )
    name = fn.expressions[0].name
    body = fn.this.copy()
    names = {1: f"_th_{name}1", 2: f"_th_{name}2"}
    for bracket in list(body.find_all(exp.Bracket)):
        target = bracket.this
        if (
            isinstance(target, (exp.Identifier, exp.Column))
            and target.name == name
            and len(bracket.expressions) == 1
            and _int_literal(bracket.expressions[0]) in names
        ):
            replacement = _var(names[_int_literal(bracket.expressions[0])])
            if bracket is body:
                body = replacement
            else:
                bracket.replace(replacement)
    used = [n for n in body.find_all(exp.Identifier, exp.Column) if n.name == name]
    if used or (isinstance(body, (exp.Identifier, exp.Column)) and body.name == name):
        raise ValueError(
            f"{node.sql(READ_DIALECT)}: the zipped element is used other than as x[1] / x[2]: no Spark form"
        )
    a, b = (
        exp.Coalesce(this=xs, expressions=[_fn("array")]) for xs in zipped.expressions
    )  # DuckDB: NULL is []
    return _fn("zip_with", a, b, _lambda(body, names[1], names[2]))


def _json_list(text: exp.Expression, to: exp.DataType, depth: int = 0) -> exp.Expression:
    """DuckDB's TRY_CAST(json(text) AS T[]...[]): element by element, an element that does not convert is NULL
    (Spark's from_json with the whole type makes the whole list NULL: `[[1, 2], [[3]]]` as BIGINT[][])."""
    inner = to.expressions[0]
    as_text = _fn("from_json", text, exp.Literal.string("ARRAY<STRING>"))
    if inner.is_type("varchar", "text", "string") and not inner.expressions:
        return as_text
    var = f"_th_j{depth}"
    if inner.this == exp.DataType.Type.ARRAY:
        element = _json_list(_var(var), inner, depth + 1)
    else:
        element = exp.TryCast(this=_var(var), to=inner.copy(), safe=True)
    return _fn("transform", as_text, _lambda(element, var))


def _quantile_disc(x: exp.Expression, q: exp.Expression) -> exp.Expression:
    """DuckDB's quantile_disc(x, q): the ceil(q·n)-th smallest non-NULL x (q·n in DOUBLE, the position
    clamped to 1..n; no value: NULL), in x's type."""
    n = exp.Count(this=x.copy())
    at = exp.Ceil(this=exp.Mul(this=exp.Cast(this=q, to=exp.DataType.build("DOUBLE")), expression=n))
    position = exp.Cast(
        this=_fn("greatest", _fn("least", at, n.copy()), exp.Literal.number(1)), to=exp.DataType.build("INT")
    )
    return _fn("try_element_at", _fn("array_sort", _fn("collect_list", x)), position)


def _spark_transforms(node: exp.Expression) -> exp.Expression:
    """Rewrite one node of a DuckDB statement where sqlglot's Spark output would not run or not agree.

    - `quantile_cont(x, q)`: sqlglot writes `PERCENTILE_CONT(x, q)`, which Spark rejects (its
      PERCENTILE_CONT takes `(q) WITHIN GROUP (ORDER BY x)`); Spark's `percentile(x, q)` is the same
      exact, linearly interpolated quantile (position (n - 1) * q), as DOUBLE like DuckDB's.
    - lead/lag/row_number/rank ... over a window with a frame (`WINDOW w AS (... ROWS ...)` shared with
      running sums): DuckDB ignores the frame, Spark refuses it; they get the window without the frame.
    - `avg(x)`: DuckDB's is DOUBLE for every numeric x; Spark keeps DECIMAL for a DECIMAL x (`avg(CASE
      ... THEN 1.0 ELSE 0.0 END)` gives 0.05882, not 0.058823529411764705): x is cast to DOUBLE, which
      Spark does anyway for integer x.
    - `x / y`: DuckDB's `/` is DOUBLE for every numeric x and y; Spark keeps DECIMAL for DECIMAL operands,
      rounded to 6 or more decimals (`(8.0 * 0.3675 + 3.0) / (8.0 * 0.3675 + 1.0)` is off by 1e-8, which
      regression's exp(w² / ν) turns into 1e-6): x is cast to DOUBLE, as Spark does anyway for integers.
    - `any_value(x) FILTER (WHERE c)`: DuckDB's any_value skips NULLs, which sqlglot writes as Spark's
      `ANY_VALUE(x) IGNORE NULLS` and then puts the FILTER after it, where Spark's grammar refuses it:
      the FILTER goes before IGNORE / RESPECT NULLS.
    - `quantile_disc(x, q)` (an aggregate): the element at position ceil(q·n) (in DOUBLE arithmetic,
      clamped to 1..n) of x's sorted non-NULL values, in x's own type, as DuckDB computes it (Spark's
      percentile_disc returns a DOUBLE: a median of token counts printed as 32.0, not 32).
    - `regexp_replace(s, p, r)` without the 'g' option replaces only the first match in DuckDB and
      every match in Spark: refused unless the pattern is anchored with ^ or $ (one match at most).
    - list indexes `xs[i]` (parsed as written, READ_DIALECT): Spark's `try_element_at(xs, i)`, 1-based,
      negative from the end, NULL out of range, as DuckDB; slices `xs[a:b]`: Spark's `slice` with
      DuckDB's bounds (both included, negative from the end, clamped).
    - `list_sum`, `list_bool_and`, `list_bool_or` (no Spark function): `aggregate` over the non-NULL
      elements, NULL for none, as DuckDB; `list_transform(list_zip(a, b), lambda x: ... x[1] ... x[2])`:
      `zip_with(a, b, ...)`; any other list_zip is refused.
    - `TRY_CAST(json(s) AS T[][])`: DuckDB makes an element that does not convert NULL, Spark's
      from_json the whole list: converted element by element.
    - `HUGEINT` (the 128-bit integer of exact products such as request_step_cost's T·w): Spark has none;
      DECIMAL(38, 0) holds the same integers, and `a // b` (Spark's DIV) and `a % b` on it stay exact.
    - `name AS [NOT] MATERIALIZED (...)`, a hint to DuckDB's planner on a CTE: Spark's grammar has none;
      dropped (the rows do not depend on it).
    Not translatable without types: `len(xs)` of a list is Spark's `size`, of a text `length`; sqlglot
    writes LENGTH: the views write `array_length(xs)` for a list (the same function in DuckDB).
    """
    for rewrite in (
        _list_rewrite,
        _list_function_rewrite,
        _window_rewrite,
        _numeric_rewrite,
        _quantile_rewrite,
        _cte_hint_rewrite,
    ):
        new = rewrite(node)
        if new is not None:
            return new
    return node


def _cte_hint_rewrite(node: exp.Expression) -> exp.Expression | None:
    """A CTE without its MATERIALIZED / NOT MATERIALIZED hint (see _spark_transforms); None: not one."""
    if not isinstance(node, exp.CTE) or node.args.get("materialized") is None:
        return None
    bare = node.copy()
    bare.set("materialized", None)
    return bare


def _list_rewrite(node: exp.Expression) -> exp.Expression | None:
    """HUGEINT, list indexes and slices, TRY_CAST(json(s) AS T[]) (see _spark_transforms); None: not one."""
    if isinstance(node, exp.DataType) and node.this == exp.DataType.Type.INT128:
        return exp.DataType.build("DECIMAL(38, 0)")
    if isinstance(node, exp.Bracket) and len(node.expressions) == 1 and not node.args.get("json_access"):
        index = node.expressions[0]
        if isinstance(index, exp.Slice):
            return _list_slice(node.this, index)
        if not (isinstance(index, exp.Literal) and index.is_string):
            return _list_element(node.this, index)
    if (
        isinstance(node, exp.TryCast)
        and isinstance(node.this, exp.ParseJSON)
        and node.to.this == exp.DataType.Type.ARRAY
    ):
        return _json_list(node.this.this, node.to)
    return None


def _list_function_rewrite(node: exp.Expression) -> exp.Expression | None:
    """list_zip under list_transform, list_sum / list_bool_and / list_bool_or, list_reduce (see
    _spark_transforms); None: not one."""
    if (
        isinstance(node, exp.Transform)
        and isinstance(node.this, exp.Anonymous)
        and node.this.name.lower() == "list_zip"
    ):
        return _zip_transform(node)
    if not isinstance(node, exp.Anonymous):
        return None
    name = node.name.lower()
    if name == "list_zip":
        raise ValueError(
            f"{node.sql(READ_DIALECT)}: list_zip has no Spark form here (only under list_transform)"
        )
    if name in _LIST_FOLDS and len(node.expressions) == 1:
        return _list_fold(node.expressions[0], _LIST_FOLDS[name])
    if name == "list_reduce":
        return _list_reduce(node)
    return None


def _list_reduce(node: exp.Anonymous) -> exp.Expression:
    """list_reduce(xs, f[, init]) -> aggregate(xs, init, f); without init DuckDB starts from the first
    element: aggregate(the rest, the first, f) (an empty or NULL list gives NULL, as in DuckDB)."""
    xs, fn, *init = node.expressions
    if init:
        return exp.Anonymous(this="aggregate", expressions=[xs, init[0], fn])
    first = exp.Anonymous(this="try_element_at", expressions=[xs.copy(), exp.Literal.number(1)])
    rest = exp.Anonymous(
        this="slice",
        expressions=[
            xs.copy(),
            exp.Literal.number(2),
            exp.Anonymous(this="size", expressions=[xs.copy()]),
        ],
    )
    return exp.Anonymous(this="aggregate", expressions=[rest, first, fn])


def _window_rewrite(node: exp.Expression) -> exp.Expression | None:
    """Frameless window functions, FILTER before IGNORE / RESPECT NULLS (see _spark_transforms); None:
    not one (a window rewritten in place is returned as it is)."""
    if isinstance(node, exp.Select) and node.args.get("windows"):
        _inline_frameless_windows(node)
        return node
    if isinstance(node, exp.Window) and isinstance(node.this, _FRAMELESS) and node.args.get("spec"):
        node.set("spec", None)
        return node
    if isinstance(node, exp.Filter) and isinstance(node.this, (exp.IgnoreNulls, exp.RespectNulls)):
        nulls = node.this
        return type(nulls)(this=exp.Filter(this=nulls.this, expression=node.expression))
    return None


def _numeric_rewrite(node: exp.Expression) -> exp.Expression | None:
    """`/` and avg in DOUBLE, regexp_replace's first match (see _spark_transforms); None: not one."""
    if (
        isinstance(node, exp.Div)
        and not node.args.get("typed")
        and not (isinstance(node.this, exp.Cast) and node.this.to.is_type("double"))
    ):
        return exp.Div(
            this=exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE")),
            expression=node.expression,
            typed=False,
            safe=node.args.get("safe"),
        )
    if isinstance(node, exp.Avg) and not isinstance(node.this, exp.Cast):
        return exp.Avg(this=exp.Cast(this=node.this, to=exp.DataType.build("DOUBLE")))
    if isinstance(node, exp.RegexpReplace):
        modifiers = node.args.get("modifiers")
        flags = modifiers.name if isinstance(modifiers, exp.Literal) else ""
        pattern = node.expression
        anchored = isinstance(pattern, exp.Literal) and (
            pattern.name.startswith("^") or (pattern.name.endswith("$") and not pattern.name.endswith("\\$"))
        )
        if "g" not in flags and not anchored:
            raise ValueError(
                f"{node.sql('duckdb')}: DuckDB replaces the first match only, Spark every "
                "match; add 'g' or anchor the pattern with ^"
            )
        node.set("modifiers", None)
        return node
    return None


def _quantile_rewrite(node: exp.Expression) -> exp.Expression | None:
    """quantile_disc and quantile_cont (see _spark_transforms); None: not one."""
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        return exp.Anonymous(this="percentile", expressions=[node.this, node.expression])
    if not isinstance(node, exp.PercentileDisc) or node.expression is None:
        return None
    if not isinstance(node.parent, (exp.WithinGroup, exp.Window, exp.Filter)) and not isinstance(
        node.expression, exp.Array
    ):
        return _quantile_disc(node.this, node.expression)
    if not isinstance(node.parent, exp.WithinGroup):
        # over a window or with a FILTER: percentile_disc(q) WITHIN GROUP (ORDER BY x): the same value, but
        # DOUBLE (DuckDB keeps x's type); an actual value, exact (as
        # Anonymous: sqlglot's Spark writer would turn PercentileDisc into the approximate percentile)
        return exp.WithinGroup(
            this=exp.Anonymous(this="percentile_disc", expressions=[node.expression]),
            expression=exp.Order(expressions=[exp.Ordered(this=node.this)]),
        )
    return None


def _transform_all(node: exp.Expression) -> exp.Expression:
    """_spark_transforms on every node: sqlglot's transform does not descend into a node a transform
    returned, so the new node's own parts (an index inside an index, a division inside avg) are
    transformed here (each transform leaves its own output as it is: no loop)."""
    new = _spark_transforms(node)
    return node if new is node else new.transform(_transform_all, copy=False)


def to_spark_sql(sql: str | exp.Expression) -> str:
    """One DuckDB statement (text, or parsed with READ_DIALECT) in Spark's dialect (CREATE VIEW becomes
    CREATE TEMPORARY VIEW). A text is transpiled once per process: each catalogue on Spark (a connection,
    a test's) makes the same views again, and transpiling all of sql/ costs ~4 CPU-s."""
    if isinstance(sql, str):
        return _text_to_spark(sql)
    return _statement_to_spark(sql.copy())


@functools.lru_cache(maxsize=1024)
def _text_to_spark(sql: str) -> str:
    return _statement_to_spark(sqlglot.parse_one(sql, read=READ_DIALECT))


def _statement_to_spark(statement: exp.Expression) -> str:
    statement = statement.transform(_transform_all, copy=False)
    if isinstance(statement, exp.Create) and statement.kind == "VIEW":
        props = statement.args.get("properties") or exp.Properties(expressions=[])
        if not any(isinstance(p, exp.TemporaryProperty) for p in props.expressions):
            props.append("expressions", exp.TemporaryProperty())
        statement.set("properties", props)
    return statement.sql(dialect="spark")


# --- the catalogue ----------------------------------------------------------------------------------
