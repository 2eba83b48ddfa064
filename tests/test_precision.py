"""The precision a run gets: chosen per machine when the configuration leaves it unset, kept (with a warning where
the hardware emulates bf16) when the user sets it."""

from __future__ import annotations

import pytest
import torch
from runs import MINILM

import train
from tasks.run.cli import make_cli
from tasks.run.precision import accelerator_type, bf16_warning, default_precision, native_bf16

AVX2 = {"avx2": True, "amx_bf16": False, "avx512_bf16": False}
AMX = {"avx2": True, "amx_bf16": True, "avx512_bf16": True}


@pytest.fixture
def cpu(monkeypatch):
    """Pretend the CPU has the given capabilities."""
    def make(capabilities: dict[str, bool]) -> None:
        monkeypatch.setattr(torch.cpu, "get_capabilities", lambda: dict(capabilities))
    return make


def test_bf16_only_where_the_cpu_multiplies_it_natively(cpu):
    cpu(AMX)
    assert native_bf16("cpu") and default_precision("cpu")[0] == "bf16-mixed"
    assert bf16_warning("bf16-mixed", "cpu") is None
    cpu(AVX2)
    assert not native_bf16("cpu") and default_precision("cpu")[0] == "32-true"
    assert "without native bf16 matrix units" in bf16_warning("bf16-mixed", "cpu")
    assert bf16_warning("32-true", "cpu") is None


def test_this_machine_gets_what_its_matmuls_say():
    """On the machine running the tests: bf16 is chosen exactly when its capabilities list bf16 matrix units."""
    capabilities = torch.cpu.get_capabilities()
    native = bool(capabilities.get("amx_bf16") or capabilities.get("avx512_bf16"))
    assert default_precision("cpu")[0] == ("bf16-mixed" if native else "32-true")


def test_accelerator_names_resolve():
    assert accelerator_type("cpu") == "cpu"
    assert accelerator_type("auto") == ("cuda" if torch.cuda.is_available() else accelerator_type("auto"))
    if not torch.cuda.is_available():
        assert accelerator_type("auto") in ("cpu", "mps")
    assert accelerator_type("gpu") == "cuda"


@pytest.mark.parametrize(("capabilities", "expected"), [(AVX2, "32-true"), (AMX, "bf16-mixed")])
def test_train_py_fills_an_unset_precision_and_records_it(capabilities, expected, cpu, tmp_path, caplog):
    cpu(capabilities)
    cli = make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", MINILM,
                          "--trainer.logger", "false", "--trainer.accelerator", "cpu",
                          "--trainer.default_root_dir", str(tmp_path)])
    assert cli.config.trainer.precision == expected  # written into config.yaml with the rest
    assert cli.trainer.precision == expected
    assert f"litbert: trainer.precision={expected}: this CPU" in caplog.text


def test_a_set_bf16_precision_is_kept_with_a_warning_on_emulating_hardware(cpu, tmp_path):
    cpu(AVX2)
    with pytest.warns(UserWarning, match="without native bf16 matrix units"):
        cli = make_cli(["--config", "configs/glue/rte.yaml", "--model.pretrained", MINILM,
                              "--trainer.logger", "false", "--trainer.accelerator", "cpu",
                              "--trainer.precision", "bf16-mixed", "--trainer.default_root_dir", str(tmp_path)])
    assert cli.trainer.precision == "bf16-mixed"


@pytest.mark.parametrize("precision", ["16-mixed", "16"])
@pytest.mark.parametrize("accelerator", ["cpu", "auto"])
def test_fp16_mixed_precision_on_the_cpu_is_refused_not_replaced(precision, accelerator, tmp_path, capsys):
    """Lightning runs bf16-mixed instead of 16-mixed on the CPU, with only a warning: the run would train in another
    precision than the one set."""
    if accelerator == "auto" and accelerator_type("auto") != "cpu":
        pytest.skip("a GPU is visible: auto is not the CPU")
    status = train.cli_main(["--config", "configs/glue/rte.yaml", "--model.pretrained", MINILM, "--trainer.logger",
                             "false", "--trainer.accelerator", accelerator, "--trainer.precision", precision,
                             "--trainer.default_root_dir", str(tmp_path), "--trainer.max_steps", "1",
                             "--trainer.limit_val_batches", "1", "--export", "false", "--predict", "false"])
    assert status == 2
    err = capsys.readouterr().err
    assert f"trainer.precision={precision} on the CPU" in err and "Set 32-true, bf16-mixed" in err
    assert not (tmp_path / "config.yaml").exists()


def test_the_shipped_configs_leave_precision_to_the_machine():
    from pathlib import Path

    configs = Path(train.__file__).parent / "configs"
    assert [str(p) for p in configs.rglob("*.yaml") if "precision:" in p.read_text()] == []
