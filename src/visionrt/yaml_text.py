"""YAML as visionrt reads it (configs, `--set` values, plans): safe, booleans only as `true` and
`false` (YAML 1.2: `off`, `on`, `yes`, `no` stay the words users typed), a key given twice in one
mapping refused, and aliases refused once they would expand past a bound."""

from __future__ import annotations

import re
from typing import Any, ClassVar

import yaml

from visionrt.errors import ConfigError

# Nodes a document may stand for once its aliases are expanded. A run's config or a plan has a
# few hundred; a "billion laughs" document (nine aliases of nine aliases …) has 10⁹, and
# expanding it took 35–45 s and all memory before a MemoryError (issue #47).
MAX_NODES = 100_000

_YAML12_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class _Refused(Exception):
    """What PyYAML reads but visionrt does not: a key given twice in one mapping (PyYAML keeps
    the last without a word), an alias inside the node it names."""


class _Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
    """SafeLoader with YAML 1.2's booleans and duplicate keys refused."""

    yaml_implicit_resolvers: ClassVar[dict[str, list[tuple[str, re.Pattern[str]]]]] = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *defaults`: merged keys may be overridden, as YAML says
                key = self.construct_object(key_node)
                line = key_node.start_mark.line + 1
                if _hashable(key) and key in seen:
                    raise _Refused(
                        f"key '{key}' is given twice (lines {seen[key]} and {line}): keep one"
                    )
                if _hashable(key):
                    seen[key] = line
        return super().construct_mapping(node, deep=deep)


_Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _YAML12_BOOL, list("tTfF"))


def _hashable(key: Any) -> bool:
    try:
        hash(key)
    except TypeError:
        return False
    return True


def _expanded_size(root: yaml.Node) -> int:
    """How many nodes `root` stands for with every alias expanded (an alias is the same node
    object reached twice), counted with each node's size memoized, so a bomb is measured in
    time linear in its text; a node that contains itself is refused."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise _Refused("an alias refers to the section that holds it")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        sizes[key] = min(total, MAX_NODES + 1)  # capped: the sum cannot grow past a number
        return sizes[key]

    return size(root)


def load_yaml(text: str, where: str) -> Any:
    """The one YAML document in `text` as Python values (None for an empty one), or a one-line
    ConfigError naming `where` ("config serve.yaml", "--set pipeline.motion.mode") for what is
    not YAML, a key given twice in one mapping, or aliases expanding past MAX_NODES."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_NODES:
            raise ConfigError(
                f"{where}: its aliases expand past {MAX_NODES:,} values, refused (a YAML alias"
                " bomb?)"
            )
        return loader.construct_document(node)
    except _Refused as err:
        raise ConfigError(f"{where}: {err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{where} is not valid YAML: {_problem(err)}") from err
    except RecursionError as err:  # nesting deeper than Python's stack
        raise ConfigError(f"{where}: nested too deeply to read") from err
    finally:
        loader.dispose()


def _problem(err: yaml.YAMLError) -> str:
    """What PyYAML found, and where, in one line."""
    problem = getattr(err, "problem", None)
    mark = getattr(err, "problem_mark", None)
    if problem and mark is not None:
        return f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    return str(err).splitlines()[0] if str(err) else type(err).__name__
