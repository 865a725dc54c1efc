"""torchtitan's Python config registry -> the settings the torchtitan reader takes.

Since February 2026 torchtitan describes a run as a Python function that returns a `Trainer.Config`
(`torchtitan/models/<model>/config_registry.py`, launched as `--module <model> --config <function>` with
`--section.option` overrides). planner does not run the file. It reads the chosen function's syntax tree and
evaluates the small language these registries are written in:

- keyword calls that build configs (`Trainer.Config(...)`, `TrainingConfig(...)`, `ParallelismConfig(...)`,
  `FullAC.Config()`, `CompileConfig(...)`, `model_registry("70B", converters=[...])`, `default_adamw(...)`);
- literals, arithmetic on numbers (`4 * 4096`), `and` / `or` / `not`, `in` and comparisons;
- local names, the module's constants, and calls to the registry's other functions (`config = llama3_8b()`);
- attribute assignments on a config (`config.training.max_context_length = 32768`) and attribute reads.

Anything else (loops, ifs, imported helpers) is left unread: an unreadable value of a setting planner needs is an
error naming its line, anything else a warning. The result is mapped onto the keys of the TOML job config of
torchtitan v0.1-v0.2.x (planner.engines.torchtitan), whose reader does the rest:

Registry settings (torchtitan main, torchtitan/config/configs.py @ b5bcd76c) -> TOML keys:
- training.max_context_length (default 2,048) -> training.seq_len;
- training.num_tokens_per_microbatch_per_dp_rank (default 16,384) / the context length -> the micro-batch in
  sequences; times parallelism.num_pp_microbatches with pp > 1 (default 1) -> training.local_batch_size, the
  micro-batch itself -> parallelism.pipeline_parallel_microbatch_size;
- training.num_tokens_per_train_step / the context length -> training.global_batch_size (default -1: one round of
  micro-batches per DP rank);
- activation_checkpoint: SelectiveAC.Config() (the Trainer's default, per-op SAC) -> selective with option op,
  FullAC.Config() -> full, None -> none; MemoryBudgetAC is not modelled;
- compile=CompileConfig(enable, enable_async_tensor_parallel) -> compile.enable,
  parallelism.enable_async_tensor_parallel;
- model_registry(flavor, converters=[Float8LinearConverter.Config(...) | MXFP8LinearConverter.Config(...)],
  moe_comm_backend=...) -> model.flavor, model.converters (NVFP4 is not modelled),
  parallelism.expert_parallel_comm_backend (standard, deepep, hybridep);
- the other training and parallelism fields -> the same names.
"""

from __future__ import annotations

import ast
import copy
from dataclasses import dataclass, field
from typing import Any

from planner.engines import torchtitan
from planner.engines.common import ExportContext, prediction_lines
from planner.errors import PlannerError
from planner.specs.layout import Layout
from planner.specs.model import ModelSpec

# Trainer.Config fields that do not change a layout's memory or time (data, logging, checkpoints, validation).
IGNORED_TRAINER_FIELDS = frozenset({
    "loss", "hf_assets_path", "profiler", "metrics", "lr_scheduler", "dataloader", "checkpoint", "validator", "comm",
    "debug", "override", "fault_tolerance", "tokenizer", "job", "dump_folder",
})
READ_TRAINER_FIELDS = frozenset({"model_spec", "training", "parallelism", "activation_checkpoint", "compile",
                                 "optimizer"})
# registry-only fields the TOML reader does not take (consumed here, or without effect on a layout)
CONSUMED = {
    "training": frozenset({"num_tokens_per_microbatch_per_dp_rank", "num_tokens_per_train_step", "max_context_length",
                           "disable_cuda_graphs"}),
    "parallelism": frozenset({"num_pp_microbatches", "spmd_backend", "enable_fsdp_symm_mem"}),
}
DEFAULT_CONTEXT = 2048  # TrainingConfig.max_context_length
DEFAULT_MICROBATCH_TOKENS = 16384  # TrainingConfig.num_tokens_per_microbatch_per_dp_rank
MAX_DEPTH = 16  # calls of registry functions inside one another


@dataclass(frozen=True)
class Unknown:
    """A value planner did not evaluate, with the line it comes from."""

    text: str
    line: int


@dataclass
class Call:
    """A config built by a keyword call: the callee's dotted name and its arguments."""

    name: str
    kwargs: dict[str, Any] = field(default_factory=dict)
    args: list[Any] = field(default_factory=list)
    line: int = 0

    @property
    def short(self) -> str:
        """The class name without a trailing '.Config' (FullAC.Config -> FullAC)."""
        parts = self.name.split(".")
        return parts[-2] if parts[-1] == "Config" and len(parts) > 1 else parts[-1]


@dataclass(frozen=True)
class Registry:
    """What read_registry found: the TOML-shaped settings, the model, and warnings."""

    config: dict[str, Any]
    model_name: str | None
    flavor: str | None
    warnings: tuple[str, ...]


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return None if base is None else f"{base}.{node.attr}"
    return None


class _Interpreter:
    def __init__(self, tree: ast.Module, source: str) -> None:
        self.source = source
        self.functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.registries = registry_imports(tree, source)
        self.constants: dict[str, Any] = {}
        self.warnings: list[str] = []
        self.depth = 0
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                value = self.eval(node.value, {})
                if not isinstance(value, Unknown):
                    self.constants[node.targets[0].id] = value

    # expressions ---------------------------------------------------------------------------------
    def eval(self, node: ast.expr, scope: dict[str, Any]) -> Any:  # noqa: C901 - one case per syntax node
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.eval(e, scope) for e in node.elts]
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in self.constants:
                return self.constants[node.id]
            return {"True": True, "False": False, "None": None}.get(node.id, Unknown(node.id, line))
        if isinstance(node, ast.UnaryOp):
            value = self.eval(node.operand, scope)
            if isinstance(node.op, ast.Not) and isinstance(value, bool):
                return not value
            if isinstance(node.op, ast.USub) and _number(value):
                return -value
            return Unknown(ast.unparse(node), line)
        if isinstance(node, ast.BinOp):
            left, right = self.eval(node.left, scope), self.eval(node.right, scope)
            if not (_number(left) and _number(right)):
                return Unknown(ast.unparse(node), line)
            result = _arith(node.op, left, right)
            return Unknown(result.text, line) if isinstance(result, Unknown) else result
        if isinstance(node, ast.BoolOp):  # Python's: the first operand that decides, else the last
            decided: Any = None
            for operand in node.values:
                decided = self.eval(operand, scope)
                if isinstance(decided, Unknown):
                    return Unknown(ast.unparse(node), line)
                truthy = True if isinstance(decided, Call) else bool(decided)  # a config object is truthy
                if truthy == isinstance(node.op, ast.Or):
                    return decided
            return decided
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            left, right = self.eval(node.left, scope), self.eval(node.comparators[0], scope)
            if isinstance(left, Unknown) or isinstance(right, Unknown):
                return Unknown(ast.unparse(node), line)
            op = node.ops[0]
            if isinstance(op, ast.In) and isinstance(right, list):
                return left in right
            if isinstance(op, ast.Eq):
                return left == right
            return Unknown(ast.unparse(node), line)
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value, scope)
            if isinstance(base, Call) and node.attr in base.kwargs:
                return base.kwargs[node.attr]
            return Unknown(ast.unparse(node), line)
        if isinstance(node, ast.Call):
            return self.call(node, scope)
        return Unknown(ast.unparse(node), line)

    def call(self, node: ast.Call, scope: dict[str, Any]) -> Any:
        name = _dotted(node.func)
        line = node.lineno
        if name is None:
            return Unknown(ast.unparse(node), line)
        if name in self.functions:  # another function of the registry, its parameters bound as Python binds them
            return self.run(name, self._bind(self.functions[name], node, scope))
        if name == "cast" and len(node.args) == 2:  # typing.cast(T, value)
            return self.eval(node.args[1], scope)
        if name == "list" and len(node.args) <= 1 and not node.keywords:  # list(converters or []): a copy
            value = self.eval(node.args[0], scope) if node.args else []
            return list(value) if isinstance(value, list) else Unknown(ast.unparse(node), line)
        if name in self.registries:  # an imported model registry, maybe under another name
            kwargs = {k.arg: self.eval(k.value, scope) for k in node.keywords if k.arg is not None}
            return Call(name, kwargs, [self.eval(a, scope) for a in node.args], line)
        last = name.split(".")[-1]
        if not (last.endswith("Config") or last in BUILDERS):
            return Unknown(ast.unparse(node), line)  # a helper planner does not run
        kwargs = {k.arg: self.eval(k.value, scope) for k in node.keywords if k.arg is not None}
        return Call(name, kwargs, [self.eval(a, scope) for a in node.args], line)

    # statements ----------------------------------------------------------------------------------
    def _bind(self, func: ast.FunctionDef, node: ast.Call, scope: dict[str, Any]) -> dict[str, Any]:
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args)]
        defaults = func.args.defaults
        bound: dict[str, Any] = {p: self.eval(d, {}) for p, d in zip(params[len(params) - len(defaults):], defaults)}
        for kw, default in zip(func.args.kwonlyargs, func.args.kw_defaults):
            if default is not None:
                bound[kw.arg] = self.eval(default, {})
        for param, arg in zip(params, node.args):
            bound[param] = self.eval(arg, scope)
        for keyword in node.keywords:
            if keyword.arg is not None:
                bound[keyword.arg] = self.eval(keyword.value, scope)
        return bound

    def run(self, function: str, bound: dict[str, Any] | None = None) -> Any:
        if function not in self.functions:
            raise PlannerError(f"no function '{function}' in the file (it has {', '.join(sorted(self.functions))})",
                               source=self.source)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise PlannerError(f"'{function}' calls the registry's functions more than {MAX_DEPTH} deep",
                               source=self.source)
        scope: dict[str, Any] = dict(bound or {})
        result: Any = None
        for stmt in self.functions[function].body:
            if isinstance(stmt, ast.Return) and stmt.value is not None:
                result = copy.deepcopy(self.eval(stmt.value, scope))
                break
            if isinstance(stmt, ast.Assign):
                value = self.eval(stmt.value, scope)
                for target in stmt.targets:
                    self.assign(target, value, scope)
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                self.assign(stmt.target, self.eval(stmt.value, scope), scope)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self._dropped_call(stmt.value)
            elif isinstance(stmt, (ast.Assert, ast.Pass)) or (
                    isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)):
                continue  # checks and docstrings
            else:
                self.warnings.append(f"{self.source}:{stmt.lineno}: '{ast.unparse(stmt).splitlines()[0]}' in "
                                     f"{function} is not read (planner evaluates assignments and config calls only)")
        self.depth -= 1
        return result

    def _dropped_call(self, node: ast.Call) -> None:
        """A call whose value is dropped, such as a registry helper that changes the config it is given
        (enable_fused_swiglu(config)): not run, and said so."""
        name = _dotted(node.func) or ast.unparse(node.func)
        self.warnings.append(f"{self.source}:{node.lineno}: the call '{name}(...)' is not run by planner; what it "
                             "changes in the config is not read")

    def assign(self, target: ast.expr, value: Any, scope: dict[str, Any]) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = value
            return
        if isinstance(target, ast.Attribute):
            base = self._writable(target.value, scope)
            if isinstance(base, Call):
                base.kwargs[target.attr] = copy.deepcopy(value)
                return
        self.warnings.append(f"{self.source}:{target.lineno}: the assignment to '{ast.unparse(target)}' is not read")

    def _writable(self, node: ast.expr, scope: dict[str, Any]) -> Any:
        """The config an assignment writes into: a section of a Trainer.Config that the call left at its default
        (config.parallelism.x = ... with no parallelism=...) is created empty, as the Trainer's default factory
        would."""
        if isinstance(node, ast.Attribute):
            base = self._writable(node.value, scope)
            if isinstance(base, Call):
                if node.attr not in base.kwargs and base.short == "Trainer" and node.attr in SECTION_CLASSES:
                    base.kwargs[node.attr] = Call(SECTION_CLASSES[node.attr], line=getattr(node, "lineno", 0))
                if node.attr in base.kwargs:
                    return base.kwargs[node.attr]
            return Unknown(ast.unparse(node), getattr(node, "lineno", 0))
        return self.eval(node, scope)


# Linear-layer converters of torchtitan main (torchtitan/components/quantization) -> the TOML reader's converter names
LINEAR_CONVERTERS = {"Float8LinearConverter": "quantize.linear.float8", "MXFP8LinearConverter": "quantize.linear.mx"}
# model_registry(moe_comm_backend=...) values the TOML reader's expert_parallel_comm_backend takes
MOE_COMM_BACKENDS = frozenset({"standard", "deepep", "hybridep"})
# Calls that build a config without a name ending in Config (the model registry, the optimizer's factory)
BUILDERS = frozenset({"model_registry", "default_adamw", "default_adam"})
# The Trainer.Config sections whose default an assignment may write into (trainer.py @ b5bcd76c default factories).
SECTION_CLASSES = {"training": "TrainingConfig", "parallelism": "ParallelismConfig", "compile": "CompileConfig"}


def registry_imports(tree: ast.Module, source: str) -> dict[str, str]:
    """The model registries a file imports, by the name the file calls them: `from torchtitan.models.<model> import
    model_registry [as name]` (and the experiments' `.../<model> import model_registry`) -> <model>; `from . import
    model_registry` -> the model of the file's own directory."""
    found: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ImportFrom):
            continue
        for alias in node.names:
            if alias.name != "model_registry":
                continue
            if node.level == 0 and node.module and node.module.startswith("torchtitan."):
                model: str | None = node.module.split(".")[-1]
            elif node.level == 1 and not node.module:
                model = registry_model_name(source)
            else:
                model = None
            if model:
                found[alias.asname or alias.name] = model
    return found


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


MAX_MAGNITUDE = 2**63  # no setting of a run is larger; arithmetic beyond it is not evaluated (a hostile 10 ** 10 ** 7)


def _arith(op: ast.operator, a: float, b: float) -> Any:
    """a op b for the four operations, floor division and powers, when every operand and the result stay within
    MAX_MAGNITUDE (a power is refused before it is computed when its result could not); else Unknown."""
    too_large = Unknown(f"{a} {type(op).__name__} {b} (beyond {MAX_MAGNITUDE:,})", 0)
    if abs(a) > MAX_MAGNITUDE or abs(b) > MAX_MAGNITUDE:
        return too_large
    result: Any
    if isinstance(op, ast.Add):
        result = a + b
    elif isinstance(op, ast.Sub):
        result = a - b
    elif isinstance(op, ast.Mult):
        result = a * b
    elif isinstance(op, ast.FloorDiv) and b:
        result = a // b
    elif isinstance(op, ast.Div) and b:
        result = a / b
    elif isinstance(op, ast.Pow):
        if abs(a) > 1 and (b > 64 or not float(b).is_integer() and b > 0 and abs(a) ** min(b, 64) > MAX_MAGNITUDE):
            return too_large
        try:
            result = a ** b
        except (OverflowError, ZeroDivisionError):
            return too_large
    else:
        return Unknown(f"{a} {type(op).__name__} {b}", 0)
    if isinstance(result, complex) or (_number(result) and abs(result) > MAX_MAGNITUDE):
        return too_large
    return result


# mapping onto the TOML reader's keys ------------------------------------------------------------
def _settings(call: Any, what: str, source: str) -> dict[str, Any]:
    """A config call's keyword arguments (an unset section: {})."""
    if call is None:
        return {}
    if not isinstance(call, Call):
        raise PlannerError(f"{what} is {_shown(call)}, which planner cannot read as a config", source=source)
    return dict(call.kwargs)


def _integer(value: Any, name: str, source: str) -> int:
    """A count the layout needs as a whole number (an integral float, 8192.0, is one)."""
    if isinstance(value, bool) or not _number(value) or not float(value).is_integer():
        raise PlannerError(f"expected a whole number, got {value!r}", source=source, field=name)
    return int(value)


def _shown(value: Any) -> str:
    return f"'{value.text}' (line {value.line})" if isinstance(value, Unknown) else repr(value)


def _needed(value: Any, name: str, source: str) -> Any:
    if isinstance(value, Call):
        raise PlannerError(f"{name} is a {value.name}(...) call (line {value.line}), not a value planner can use; "
                           f"write the value, or pass --{name} N with the config", source=source)
    if isinstance(value, Unknown):
        raise PlannerError(f"{name} is set by {_shown(value)}, which planner does not evaluate; write the value, or "
                           f"pass --{name} N with the config", source=source)
    return value


def _converters(model: Call | None, source: str) -> list[str]:
    """The model's converters as the TOML reader names them: float8, or the MX converter."""
    if model is None:
        return []
    names: list[str] = []
    converters = model.kwargs.get("converters") or []
    if not isinstance(converters, list):
        raise PlannerError(f"model_registry(converters=...) is {_shown(converters)}, which planner cannot read",
                           source=source)
    for conv in converters:
        short = conv.short if isinstance(conv, Call) else str(conv)
        if "NVFP4" in short:
            raise PlannerError(f"{short}: torchtitan's NVFP4 training is not modelled (torchao's prototype kernels; "
                               "planner's fp4 is Transformer Engine's NVFP4 recipe, engine megatron); use the bf16, "
                               "float8 or MXFP8 config", source=source)
        if short in LINEAR_CONVERTERS:
            names.append(LINEAR_CONVERTERS[short])
        elif short.startswith("MXFP8"):
            names.append("quantize.grouped_mm.mx")
        elif short.startswith("Float8"):
            names.append("quantize.grouped_mm.float8")
        else:
            names.append(short)
    return names


FLOAT8_FSDP_SETTINGS = ("enable_fsdp_float8_all_gather", "precompute_float8_dynamic_scale_for_fsdp")


def _float8_settings(model: Call | None, source: str) -> dict[str, Any] | None:
    """The model's Float8LinearConverter as the TOML reader's [quantize.linear.float8] table: its recipe_name, else
    torchtitan main's default, rowwise (torchtitan/components/quantization/float8.py @ b5bcd76c: recipe_name
    Literal["rowwise", "rowwise_with_gw_hp"] = "rowwise"; torchao's tensorwise recipe is not offered there since
    6348d93d1). A converter that sets the float8 all-gather fields is of the registry's first releases, before
    6348d93d1, whose default was the tensorwise recipe (recipe_name None): its fields pass on as they are. None
    without that converter."""
    converters = model.kwargs.get("converters") if model is not None else None
    for conv in converters if isinstance(converters, list) else []:
        if isinstance(conv, Call) and conv.short == "Float8LinearConverter":
            fsdp = {key: conv.kwargs[key] for key in FLOAT8_FSDP_SETTINGS if key in conv.kwargs}
            if "recipe_name" not in conv.kwargs and fsdp:
                return fsdp
            recipe = _needed(conv.kwargs.get("recipe_name", "rowwise"), "Float8LinearConverter recipe_name", source)
            return {**fsdp, "recipe_name": str(recipe)}
    return None


def _activation_checkpoint(value: Any, present: bool, source: str) -> dict[str, Any]:
    if not present:  # Trainer.Config's default: SelectiveAC.Config (per-op selective checkpointing)
        return {"mode": "selective", "selective_ac_option": "op"}
    if value is None:
        return {"mode": "none"}
    if isinstance(value, Call):
        kind = value.short
        if kind == "FullAC":
            return {"mode": "full"}
        if kind == "SelectiveAC":
            return {"mode": "selective", "selective_ac_option": "op"}
        if kind == "MemoryBudgetAC":
            raise PlannerError("activation_checkpoint MemoryBudgetAC (torch.compile's memory-budget partitioner) is not "
                               "modelled; use FullAC, SelectiveAC or None", source=source)
    raise PlannerError(f"activation_checkpoint is {_shown(value) if not isinstance(value, Call) else value.name}, "
                       "which planner does not know (FullAC, SelectiveAC, MemoryBudgetAC or None)", source=source)


def to_toml(trainer: Any, model_name: str | None, source: str, warnings: list[str],
            registries: frozenset[str] = frozenset({"model_registry"})) -> tuple[dict[str, Any], str | None]:
    """A `Trainer.Config(...)` value -> (the TOML reader's settings, the model flavor); `registries` are the names the
    file calls its model registries by."""
    if isinstance(trainer, Unknown) and trainer.text.startswith("to_graph_trainer_config("):
        base = ast.unparse(ast.parse(trainer.text, mode="eval").body.args[0])  # type: ignore[attr-defined]
        raise PlannerError(
            f"the function returns {_shown(trainer)}: torchtitan's graph_trainer (experiments/graph_trainer) traces the "
            "step with make_fx and runs its own graph-based activation checkpointing, which planner does not model; "
            f"read the eager config it wraps ({base}) with --config, or give the layout on the command line",
            source=source)
    if not isinstance(trainer, Call):
        raise PlannerError(f"the function returns {_shown(trainer)}, not a Trainer.Config(...) that planner can read",
                           source=source)
    if trainer.short == "Controller" or isinstance(trainer.kwargs.get("trainer"), Call):
        raise PlannerError(f"{trainer.name}(...) is a reinforcement-learning controller (torchtitan/experiments/rl): its "
                           "trainer's batches come from the rollouts and its generator runs beside it, which planner "
                           "does not model; planner reads Trainer.Config functions", source=source)
    for key in trainer.kwargs:
        if key not in READ_TRAINER_FIELDS and key not in IGNORED_TRAINER_FIELDS:
            warnings.append(f"{source}: Trainer.Config {key}=... is not known to planner and was ignored; if it "
                            "changes memory, the estimate does not include it")
    model = trainer.kwargs.get("model_spec")
    flavor = None
    if isinstance(model, Call) and (model.name in registries or model.name.split(".")[-1] == "model_registry"):
        first = model.args[0] if model.args else model.kwargs.get("flavor")
        flavor = str(_needed(first, "model_registry flavor", source))
    elif model is not None:
        raise PlannerError(f"model_spec is {_shown(model) if not isinstance(model, Call) else model.name + '(...)'}; "
                           "planner reads model_registry('<flavor>', ...) (or give the model with --model)",
                           source=source)
    training = _settings(trainer.kwargs.get("training"), "training", source)
    parallelism = _settings(trainer.kwargs.get("parallelism"), "parallelism", source)
    compile_ = _settings(trainer.kwargs.get("compile"), "compile", source)
    for section, values in (("training", training), ("parallelism", parallelism)):
        for key, value in values.items():
            if isinstance(value, (Unknown, Call)):
                values[key] = _needed(value, f"{section}.{key}", source)
    context = _integer(training.get("max_context_length", DEFAULT_CONTEXT), "training.max_context_length", source)
    tokens = _integer(training.get("num_tokens_per_microbatch_per_dp_rank", DEFAULT_MICROBATCH_TOKENS),
                      "training.num_tokens_per_microbatch_per_dp_rank", source)
    step_tokens = _integer(training.get("num_tokens_per_train_step", -1), "training.num_tokens_per_train_step", source)
    if context < 1 or tokens < 1:
        raise PlannerError("max_context_length and num_tokens_per_microbatch_per_dp_rank must be positive", source=source,
                           field="training")
    if tokens % context:
        raise PlannerError(f"num_tokens_per_microbatch_per_dp_rank ({tokens}) is not a multiple of max_context_length "
                           f"({context}); planner models whole sequences per micro-batch", source=source,
                           field="training.num_tokens_per_microbatch_per_dp_rank")
    micro = tokens // context
    pp = _integer(parallelism.get("pipeline_parallel_degree", 1), "parallelism.pipeline_parallel_degree", source)
    rounds = _integer(parallelism.get("num_pp_microbatches", 1), "parallelism.num_pp_microbatches", source) if pp > 1 else 1
    for section, values in (("training", training), ("parallelism", parallelism)):
        for key in CONSUMED[section]:
            values.pop(key, None)
    toml: dict[str, Any] = {
        "training": {**training, "seq_len": context, "local_batch_size": micro * rounds},
        "parallelism": parallelism,
        "activation_checkpoint": _activation_checkpoint(trainer.kwargs.get("activation_checkpoint"),
                                                        "activation_checkpoint" in trainer.kwargs, source),
        "model": {"converters": _converters(model if isinstance(model, Call) else None, source)},
        "optimizer": {"name": "AdamW"},
    }
    float8 = _float8_settings(model if isinstance(model, Call) else None, source)
    if float8 is not None:
        toml["quantize"] = {"linear": {"float8": float8}}
    if step_tokens > 0:
        if step_tokens % context:
            raise PlannerError(f"num_tokens_per_train_step ({step_tokens}) is not a multiple of max_context_length "
                               f"({context})", source=source, field="training.num_tokens_per_train_step")
        toml["training"]["global_batch_size"] = step_tokens // context
    if pp > 1:
        parallelism["pipeline_parallel_microbatch_size"] = micro
    backend = model.kwargs.get("moe_comm_backend") if isinstance(model, Call) else None
    if backend is not None:  # torchtitan main names the expert all-to-all in the model's registry entry
        backend = _needed(backend, "model_registry moe_comm_backend", source)
        if backend not in MOE_COMM_BACKENDS:
            warnings.append(f"{source}: model_registry moe_comm_backend={backend!r} is not modelled; read as the "
                            "standard all-to-all")
            backend = "standard"
        parallelism["expert_parallel_comm_backend"] = backend
    if model_name is not None:
        toml["model"]["name"] = model_name
    if flavor is not None:
        toml["model"]["flavor"] = flavor
    components = compile_.get("components", ["model", "loss"])  # CompileConfig's default components
    if _needed(compile_.get("enable", False), "compile.enable", source) is True:
        toml["compile"] = {"enable": True, "components": _needed(components, "compile.components", source)}
    if _needed(compile_.get("enable_async_tensor_parallel", False), "compile.enable_async_tensor_parallel",
               source) is True:
        parallelism["enable_async_tensor_parallel"] = True
    optimizer = trainer.kwargs.get("optimizer")
    if isinstance(optimizer, Call) and "adam" not in optimizer.name.lower():
        toml["optimizer"] = {"name": optimizer.short}
    return toml, flavor


def split_registry_args(args: list[str]) -> tuple[str | None, str | None, list[str]]:
    """(--module NAME, --config NAME, the --section.option overrides) from torchtitan's command line."""
    module = config = None
    rest: list[str] = []
    i = 0
    while i < len(args):
        tok = args[i]
        name, eq, inline = tok.partition("=")
        if name in ("--module", "--config", "--job.module", "--job.config"):
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            i += 1 if eq else 2
            if name.endswith("module"):
                module = value
            else:
                config = value
            continue
        rest.append(tok)
        i += 1
    return module, config, rest


def registry_model_name(path_text: str) -> str | None:
    """The model a registry belongs to, from its path: torchtitan/models/<name>/config_registry.py."""
    parts = path_text.replace("\\", "/").split("/")
    if len(parts) >= 2 and parts[-1].endswith(".py"):
        return parts[-2]
    return None


def _apply_overrides(trainer: Any, overrides: list[str], source: str) -> None:
    """torchtitan's `--section.option value` flags over the function's config (the command line wins), on the
    Trainer.Config's sections, before they are mapped."""
    if not overrides or not isinstance(trainer, Call):
        return
    sections = {name: dict(value.kwargs) for name, value in trainer.kwargs.items() if isinstance(value, Call)}
    changed = torchtitan.apply_overrides(sections, overrides, source)
    for name, values in changed.items():
        if name not in SECTION_CLASSES:
            continue  # overrides of settings planner does not read
        section = trainer.kwargs.get(name)
        if not isinstance(section, Call):
            section = trainer.kwargs[name] = Call(SECTION_CLASSES[name])
        section.kwargs = dict(values)


def read_registry(text: str, function: str | None, *, source: str, module: str | None = None,
                  overrides: list[str] | None = None) -> Registry:
    """The function's Trainer.Config with `overrides` applied, read as the TOML reader's settings (see the module
    docstring)."""
    try:
        tree = ast.parse(text, filename=source)
    except SyntaxError as err:
        raise PlannerError(f"not Python (line {err.lineno}: {err.msg})", source=source) from None
    except (RecursionError, MemoryError, ValueError):  # nesting beyond the parser's stack, a NUL byte
        raise PlannerError("not a config registry planner can parse (nested too deep, or not text)",
                           source=source) from None
    interp = _Interpreter(tree, source)
    if not function:
        raise PlannerError("a torchtitan config registry needs the function to read: --config NAME in the engine "
                           f"args (the file has {', '.join(sorted(interp.functions)) or 'no functions'})", source=source)
    trainer = interp.run(function)
    _apply_overrides(trainer, list(overrides or []), source)
    warnings = list(interp.warnings)
    if module is None:  # the model registry the config calls (a file may import several), else the file's directory
        spec = trainer.kwargs.get("model_spec") if isinstance(trainer, Call) else None
        called = interp.registries.get(spec.name) if isinstance(spec, Call) else None
        only = set(interp.registries.values())
        module = called or (only.pop() if len(only) == 1 else None)
    model_name = module if module else registry_model_name(source)
    toml, flavor = to_toml(trainer, model_name, f"{source}: {function}", warnings, frozenset(interp.registries)
                           | {"model_registry"})
    return Registry(config=toml, model_name=model_name, flavor=flavor, warnings=tuple(warnings))


# --- writer ----------------------------------------------------------------------------------------
# Layout -> a torchtitan main config function (the format this module reads). The layout is first mapped onto what
# torchtitan runs (planner.engines.torchtitan.engine_layout, as for the TOML writer), then onto what a registry can
# say: every layer or per-op checkpointing (no every-n-th layer), no expert TP (experts shard over FSDP x EP).


def engine_layout(model: ModelSpec, layout: Layout) -> tuple[Layout, tuple[str, ...]]:
    """The layout torchtitan main would run for this one, and a note per change."""
    mapped, notes = torchtitan.engine_layout(model, layout, registry=True)
    changes: dict[str, Any] = {}
    extra: list[str] = []
    if mapped.recompute_layers_per_stage is not None:
        changes["recompute_layers_per_stage"] = None
        extra.append(f"recompute of {mapped.recompute_layers_per_stage} layers per stage -> all layers: torchtitan "
                     "main checkpoints every layer (FullAC) or per op (SelectiveAC)")
    if mapped.ep > 1 and mapped.expert_tp != 1:
        changes["etp"] = 1
        extra.append(f"etp {mapped.expert_tp} -> 1: torchtitan main shards experts over FSDP x EP, with no expert "
                     "tensor parallelism")
    if changes:
        mapped = mapped.model_copy(update=changes)
    return mapped, (*notes, *extra)


def function_name(model_id: str) -> str:
    """The exported function's name: planner_<model id as an identifier>."""
    return "planner_" + "".join(c if c.isalnum() else "_" for c in model_id)


def _python(value: Any) -> str:
    return repr(value) if not isinstance(value, str) else '"' + value.replace('"', '\\"') + '"'


def render(ctx: ExportContext) -> str:
    """The function, with planner's prediction and the command that runs it in its header."""
    lay = ctx.layout
    named = torchtitan.flavor_for(ctx.model_id)
    if named is None:
        raise PlannerError(f"'{ctx.model_id}' has no torchtitan flavor, and planner writes no registry for torchtitan's "
                           "transformers backend; export --to torchtitan (the TOML with the backend) instead")
    name, flavor = named
    tables = torchtitan.tables(ctx)
    training, parallelism = tables["training"], dict(tables["parallelism"])
    micro = int(parallelism.pop("pipeline_parallel_microbatch_size", lay.micro_batch))
    rounds = int(training["local_batch_size"]) // micro if lay.pp > 1 else 1
    registry_args = [f'"{flavor}"']
    converter_class = {toml_name: cls for cls, toml_name in LINEAR_CONVERTERS.items()}
    used = [converter_class[c] for c in tables["model"].get("converters", [])]
    if used:  # Float8LinearConverter's default recipe is rowwise, the only per-row recipe engine_layout leaves
        registry_args.append("converters=[" + ", ".join(f"{c}.Config()" for c in used) + "]")
    backend = parallelism.pop("expert_parallel_comm_backend", None)
    if lay.ep > 1 and lay.moe_dispatcher == "hybridep":
        backend = "hybridep"
    if backend:
        registry_args.append(f'moe_comm_backend="{backend}"')
    parallelism.pop("expert_tensor_parallel_degree", None)  # 1: torchtitan main has no expert TP
    async_tp = parallelism.pop("enable_async_tensor_parallel", False)
    if lay.pp > 1:
        parallelism["num_pp_microbatches"] = rounds
    train_kwargs = {
        "num_tokens_per_microbatch_per_dp_rank": f"{micro} * {lay.seq_len}",
        "max_context_length": str(lay.seq_len),
        "num_tokens_per_train_step": f"{lay.global_batch} * {lay.seq_len}",
    }
    for key in ("dtype", "enable_cpu_offload"):
        if key in training:
            train_kwargs[key] = _python(training[key])
    mode = tables["activation_checkpoint"]["mode"]
    ac = {"none": "None", "full": "FullAC.Config()"}.get(mode, "SelectiveAC.Config()")
    compiled = tables.get("compile", {}).get("components", [])
    compile_kwargs = [f"enable={bool(compiled)}"] + ([f"components={compiled!r}"] if compiled else []) + (
        ["enable_async_tensor_parallel=True"] if async_tp else [])
    fn = function_name(ctx.model_id)
    nodes_gpus = min(lay.gpus, ctx.hardware.node.gpus_per_node)
    lines = [f"# {line}".replace("<this file>", f'<this file> --engine-args "--config {fn}"')
             for line in prediction_lines(ctx)]
    lines += [f"# torchtitan main: put this function in a config registry (e.g. torchtitan/models/{name}/"
              "config_registry.py, or a module of your own)",
              f"# and run: NGPU={nodes_gpus} ./run_train.sh --module {name} --config {fn} (on each node)",
              "# Data, tokenizer, optimizer and checkpoint settings stay torchtitan's defaults: add yours.",
              "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig",
              "from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC  # noqa: F401",
              f"from torchtitan.models.{name} import model_registry",
              "from torchtitan.trainer import Trainer"]
    if used:
        lines.insert(len(lines) - 2, f"from torchtitan.components.quantization import {', '.join(used)}")
    lines += ["", "", f"def {fn}() -> Trainer.Config:", "    return Trainer.Config(",
              f"        model_spec=model_registry({', '.join(registry_args)}),",
              "        training=TrainingConfig("]
    lines += [f"            {key}={value}," for key, value in train_kwargs.items()]
    lines += ["        ),", "        parallelism=ParallelismConfig("]
    lines += [f"            {key}={_python(value)}," for key, value in parallelism.items()]
    lines += ["        ),", f"        activation_checkpoint={ac},",
              f"        compile=CompileConfig({', '.join(compile_kwargs)}),", "    )"]
    return "\n".join(lines) + "\n"
