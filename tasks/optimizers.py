"""The optimizer a task trains with, chosen by name or class path, and the depth of each parameter for layer-wise
learning-rate decay.

- `adamw` (the default): torch's AdamW, with the fused kernel (`EncoderTask.configure_optimizers` says when not);
- `adam`: torch's Adam, whose weight decay is an L2 term added to the gradient (AdamW's is decoupled), also fused;
- `adafactor`: torch's Adafactor (Shazeer & Stern, 2018), factored second moments and no first moment: a fraction of
  Adam's optimizer memory. Its learning rate caps the relative step size (torch's default is 1e-2);
- any other `torch.optim.Optimizer` by class path (`torch.optim.SGD`), its other arguments in `optimizer_args`.

Layer-wise learning-rate decay (ELECTRA, Clark et al., 2020, appendix A; DeBERTa's fine-tuning; BEiT's
`get_layer_id`): the head trains at the full rate and each layer below it at `layer_decay` times the rate of the
layer above. Depths count from the input: the embeddings and position tables 0, encoder block i at i + 1, the head
(and a pre-norm encoder's final norm, which sits on top of the last block) at num_layers + 1; a parameter at depth d
trains at learning_rate * layer_decay ** (num_layers + 1 - d). Deviation: ELECTRA counts the head as num_layers + 2,
one step above its last layer with no layer in between; here the head is the next layer up, as in DeBERTa and BEiT.
"""

from __future__ import annotations

import importlib
import inspect
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from tasks.base import Optimization

# Optimizers by name; any other torch.optim.Optimizer is taken by its class path.
OPTIMIZERS: dict[str, type[torch.optim.Optimizer]] = {
    "adamw": torch.optim.AdamW,
    "adam": torch.optim.Adam,
    "adafactor": torch.optim.Adafactor,
}
# Arguments of the constructor that litbert fills in itself (`weight_decay` per parameter group), with the setting
# that gives each.
FILLED = {"params": "the task's parameters", "lr": "model.optimization.learning_rate",
          "weight_decay": "model.optimization.weight_decay"}


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    """The optimizer named `name`: a key of `OPTIMIZERS` or the class path of a `torch.optim.Optimizer`."""
    if name in OPTIMIZERS:
        return OPTIMIZERS[name]
    choices = f"one of {', '.join(OPTIMIZERS)}, or the class path of a torch.optim.Optimizer (e.g. torch.optim.SGD)"
    if "." not in name:
        raise ValueError(f"model.optimization.optimizer={name!r} is no optimizer litbert knows; give {choices}.")
    module, _, attribute = name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"model.optimization.optimizer={name!r} cannot be imported ({error}); give {choices}.") \
            from None
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        raise ValueError(f"model.optimization.optimizer={name!r} is {found!r}, not a torch.optim.Optimizer; give "
                         f"{choices}.")
    return found


def _same_form(value: Any, like: Any) -> bool:
    """Whether `value` (a setting of `Optimization`) has the form of the constructor's default `like`: Adam's betas
    (two floats) and eps (a float) are Adafactor's beta2_decay and eps (a pair) in name only."""
    if isinstance(like, tuple):
        return isinstance(value, tuple) and len(value) == len(like) and all(isinstance(v, float) for v in like)
    return isinstance(like, float)


def optimizer_arguments(optimization: Optimization) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """The optimizer class and its constructor's arguments but the parameters and the weight decay (given per
    parameter group): the learning rate, `betas` and `eps` where the class reads them as Adam does, and
    `optimizer_args`. A setting the class does not read is refused unless it is at its default."""
    cls = optimizer_class(optimization.optimizer)
    name = optimization.optimizer
    accepted = inspect.signature(cls).parameters
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values())
    defaults = {field: getattr(type(optimization), field) for field in ("betas", "eps", "weight_decay")}
    for needed in ("lr", "weight_decay"):
        if needed not in accepted and not open_ended:
            if needed == "weight_decay" and optimization.weight_decay == 0:
                continue
            raise ValueError(f"model.optimization.optimizer={name!r} takes no `{needed}` argument, but "
                             f"{FILLED[needed]} sets one; "
                             + ("set model.optimization.weight_decay 0." if needed == "weight_decay"
                                else "litbert schedules the learning rate and needs it; choose another optimizer."))
    arguments: dict[str, Any] = {"lr": optimization.learning_rate}
    for setting in ("betas", "eps"):
        value = getattr(optimization, setting)
        own = accepted.get(setting)
        if own is not None and _same_form(value, own.default):
            arguments[setting] = value
        elif value != defaults[setting]:
            where = f"its own `{setting}` has another form ({own.default!r}); give it in " \
                    f"model.optimization.optimizer_args" if own is not None else f"it has no `{setting}`"
            raise ValueError(f"model.optimization.{setting}={value!r} is an Adam setting; "
                             f"model.optimization.optimizer={name!r} does not read it ({where}). Remove it.")
    extra = dict(optimization.optimizer_args or {})
    for key in extra:
        if key in FILLED or key in arguments:
            setting = FILLED.get(key, f"model.optimization.{key}")
            raise ValueError(f"model.optimization.optimizer_args.{key}: litbert gives this argument from {setting}; "
                             f"set it there and remove it from optimizer_args.")
        if key not in accepted and not open_ended:
            known = [p for p in accepted if p not in FILLED and p not in arguments]
            raise ValueError(f"model.optimization.optimizer_args.{key}: {cls.__module__}.{cls.__qualname__} takes no "
                             f"such argument; it takes {', '.join(known)}.")
    check_values(cls, arguments, extra, name)
    return cls, {**arguments, **extra}


def check_values(cls: type[torch.optim.Optimizer], arguments: dict[str, Any], extra: dict[str, Any],
                 name: str) -> None:
    """The optimizer's own checks of its arguments' values (a beta of 1.5, a negative eps or momentum), made on a
    stand-in parameter before any data is read, and refused under the settings they come from: torch's message
    names its argument, not litbert's setting, and came only once the data was tokenised. A refusal that names no
    setting is the optimizer's (`name`): it refuses to be built on the task's parameters (Muon takes 2-D ones only)."""
    try:
        cls([nn.Parameter(torch.zeros(1))], **arguments, **extra)
    except (ValueError, TypeError) as error:
        given = {"model.optimization.learning_rate": ("lr", "learning rate", arguments["lr"])}
        given |= {f"model.optimization.{name}": (name, "beta" if name == "betas" else name, arguments[name])
                  for name in ("betas", "eps") if name in arguments}
        given |= {f"model.optimization.optimizer_args.{key}": (key, key, value) for key, value in extra.items()}
        said, path = str(error).lower(), f"{cls.__module__}.{cls.__qualname__}"
        named = [setting for setting, (argument, word, _) in given.items() if argument in said or word in said]
        if not named:
            raise ValueError(f"model.optimization.optimizer={name!r}: {path} refuses to be built ({error}), here on a "
                             f"stand-in for the task's parameters, which it would train all with one optimizer (1-D "
                             f"norm weights and biases too). Give it what it needs in "
                             f"model.optimization.optimizer_args, or choose another optimizer.") from None
        settings = ", ".join(f"{setting}={given[setting][2]!r}" for setting in named)
        pronoun = "it" if len(named) == 1 else "them"
        raise ValueError(f"{settings}: {path} refuses {pronoun} ({error}); give a value it takes.") from None


def fusable(cls: type[torch.optim.Optimizer], arguments: dict[str, Any]) -> bool:
    """Whether litbert picks the fused kernel for this optimizer: Adam and AdamW, unless `optimizer_args` chose an
    implementation (`fused` or `foreach`)."""
    return cls in (torch.optim.Adam, torch.optim.AdamW) and not {"fused", "foreach"} & arguments.keys()


def layer_depths(encoder: nn.Module) -> dict[int, int]:
    """id(parameter) -> depth for layer-wise learning-rate decay (see the module docstring): block i at i + 1, the
    final norm at num_layers + 1 (the head's), everything else of the encoder (embeddings, position tables) at 0.
    Found by module, not by name: a wrapper (FSDP's, torch.compile's) prefixes the names, not the modules."""
    top = len(encoder.blocks) + 1
    depths = {id(param): i + 1 for i, block in enumerate(encoder.blocks) for param in block.parameters()}
    depths.update({id(param): top for param in encoder.final_norm.parameters()})
    return {id(param): depths.get(id(param), 0) for param in encoder.parameters()}
