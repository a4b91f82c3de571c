"""The ``kernforge evolve`` configuration: one YAML or TOML file, read strictly.

::

    evolve:      # kernforge.evolve.config.EvolveConfig (seed, max_iterations, eval_slots, ...)
      seed: 7
      max_iterations: 40
    proposers:   # one or more; picked per iteration by weight
      - {kind: offline, weight: 1}
      - kind: llm
        weight: 2
        base_url: http://127.0.0.1:8000/v1
        api_key_env: OPENAI_API_KEY
        models: [{name: fast, weight: 0.6}, {name: big, weight: 0.4}]
      - {kind: command, command: "my-agent --stdin", timeout_s: 600}
    tuner:       # the inner tuner of every candidate
      trials: 30
      preset: quick
    contract: |  # the kernel contract shown to the proposers (default: from the recording)
      ...

An unknown key anywhere, a missing file or a malformed value is a :class:`ConfigError` that
names the file and the key.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import ConfigError
from ..core.strict import strict_keys
from ..evolve.config import EvolveConfig
from ..llm.config import LLMConfig

TOP_KEYS = ("evolve", "proposers", "tuner", "contract", "prompt")
KEYS_HINT = "see docs/evolve.md for the config's sections, their keys and types"
SYNTAX_HINT = "fix the syntax (docs/evolve.md shows a whole config)"
PROPOSER_KEYS: dict[str, tuple[str, ...]] = {
    "offline": ("rules",),
    "command": ("command", "timeout_s"),
    "llm": ("retries", "runtime_aware") + tuple(f.name for f in dataclasses.fields(LLMConfig)),
}


@dataclass(frozen=True)
class TunerSection:
    trials: int = 30
    preset: str = "quick"
    repeat: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("trials", "repeat"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "trials" else 1):
                raise ConfigError(f"tuner.{name}={v!r} must be a "
                                  f"{'non-negative' if name == 'trials' else 'positive'} integer")
        if self.preset not in ("quick", "standard", "full"):
            raise ConfigError(f"tuner.preset={self.preset!r} is not a preset",
                              hint="use quick, standard or full")


@dataclass(frozen=True)
class PromptSection:
    task: str = ""
    hardware: str = ""


@dataclass(frozen=True)
class ProposerSpec:
    """One proposer: its registry ``kind``, ensemble ``weight`` and its own settings."""

    kind: str
    weight: float = 1.0
    settings: dict[str, Any] = field(default_factory=dict)

    def llm_config(self) -> LLMConfig:
        return LLMConfig.from_mapping({k: v for k, v in self.settings.items()
                                       if k not in ("retries", "runtime_aware")})


@dataclass(frozen=True)
class RunConfig:
    evolve: EvolveConfig
    proposers: tuple[ProposerSpec, ...]
    tuner: TunerSection = field(default_factory=TunerSection)
    contract: str = ""
    prompt: PromptSection = field(default_factory=PromptSection)
    source: str = "<dict>"

    def evolve_config(self, contract: str) -> EvolveConfig:
        """The evolution settings with the proposer weights and the contract filled in."""
        weights = tuple(p.weight for p in self.proposers)
        return dataclasses.replace(self.evolve, contract=self.contract or contract,
                                   proposer_weights=weights if len(weights) > 1 else None)


def _strict(data: Any, allowed: Sequence[str], where: str, src: str) -> dict[str, Any]:
    return strict_keys(data, allowed, where, source=src)


def _proposer(data: Any, i: int, src: str) -> ProposerSpec:
    where = f"proposers[{i}]"
    if not isinstance(data, Mapping) or "kind" not in data:
        raise ConfigError(f"{src}: {where} needs a 'kind'",
                          hint=f"kind is one of: {', '.join(PROPOSER_KEYS)}")
    kind = str(data["kind"])
    if kind not in PROPOSER_KEYS:
        raise ConfigError(f"{src}: {where}.kind={kind!r} is not a proposer",
                          hint=f"kind is one of: {', '.join(PROPOSER_KEYS)}")
    d = _strict(data, ("kind", "weight") + PROPOSER_KEYS[kind], where, src)
    weight = d.pop("weight", 1.0)
    d.pop("kind")
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight < 0:
        raise ConfigError(f"{src}: {where}.weight={weight!r} must be a number >= 0",
                          hint="weight = 1.0 (how often this proposer is asked)")
    if kind == "command" and not d.get("command"):
        raise ConfigError(f"{src}: {where} (command) needs 'command'",
                          hint="the agent CLI to run, prompt on stdin, reply on stdout")
    spec = ProposerSpec(kind, float(weight), d)
    if kind == "llm":
        try:
            spec.llm_config()
        except ConfigError as exc:
            raise ConfigError(f"{src}: {where}: {exc.message}", hint=exc.hint) from None
    return spec


def _section(cls: type, data: Any, name: str, src: str) -> Any:
    allowed = tuple(f.name for f in dataclasses.fields(cls))
    try:
        return cls(**_strict(data, allowed, name, src))
    except ConfigError as exc:
        if exc.message.startswith(src):
            raise
        raise ConfigError(f"{src}: {exc.message}", hint=exc.hint or KEYS_HINT) from None
    except TypeError as exc:
        raise ConfigError(f"{src}: bad value in {name}: {exc}", hint=KEYS_HINT) from None


def config_from_dict(data: Any, source: str = "<dict>") -> RunConfig:
    """Validate plain data (a parsed file) into a :class:`RunConfig`."""
    d = _strict(data, TOP_KEYS, "the top level", source)
    try:
        evolve = EvolveConfig.from_dict(_strict(d.get("evolve", {}), [
            f.name for f in dataclasses.fields(EvolveConfig)], "evolve", source))
    except ConfigError as exc:
        if exc.message.startswith(source):
            raise
        raise ConfigError(f"{source}: evolve: {exc.message}",
                          hint=exc.hint or KEYS_HINT) from None
    except TypeError as exc:
        raise ConfigError(f"{source}: bad value in evolve: {exc}", hint=KEYS_HINT) from None
    raw = d.get("proposers", [{"kind": "offline"}])
    if not isinstance(raw, list) or not raw:
        raise ConfigError(f"{source}: proposers must be a non-empty list",
                          hint="e.g. proposers: [{kind: offline}]")
    proposers = tuple(_proposer(p, i, source) for i, p in enumerate(raw))
    contract = d.get("contract", "")
    if not isinstance(contract, str):
        raise ConfigError(f"{source}: contract must be text",
                          hint="contract = \"...\": what every variant must keep")
    return RunConfig(evolve, proposers, _section(TunerSection, d.get("tuner", {}), "tuner",
                                                 source),
                     contract, _section(PromptSection, d.get("prompt", {}), "prompt", source),
                     source)


def load_config(path: str | Path) -> RunConfig:
    """Read a ``.yaml``/``.yml`` or ``.toml`` file strictly (see the module docstring)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"config file {p} is a directory",
                          hint="give the .yaml or .toml file of the run (--config FILE); the "
                               "recordings are the positional argument")
    if not p.is_file():
        raise ConfigError(f"config file {p} not found", hint="give a .yaml or .toml file")
    try:
        text = p.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {p} is unreadable ({exc})",
                          hint="a config is UTF-8 YAML or TOML text") from None
    return config_from_dict(_parse(p, text), str(p))


def _parse(p: Path, text: str) -> Any:
    if p.suffix == ".toml":
        import tomllib
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{p}: not valid TOML ({exc})", hint=SYNTAX_HINT) from None
    if p.suffix in (".yaml", ".yml"):
        try:
            import yaml
        except ModuleNotFoundError:
            raise ConfigError(f"{p}: reading YAML needs PyYAML",
                              hint="pip install pyyaml, or write the config as TOML") from None
        try:
            return yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            raise ConfigError(f"{p}: not valid YAML ({exc})", hint=SYNTAX_HINT) from None
    raise ConfigError(f"{p}: unknown config format {p.suffix!r}",
                      hint="use a .yaml, .yml or .toml file")
