"""`diagnose`: each finding on a model built to show it, its numbers checked by hand, and no
finding on a healthy model."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from tensor_tracker import Diagnosis, Tracker, diagnose, diagnosis_stats, track
from tensor_tracker._data.diagnose import dead_fraction


def _mlp(act: type[nn.Module], depth: int, width: int = 32, scale: float = 1.0) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(depth):
        linear = nn.Linear(width, width)
        with torch.no_grad():
            linear.weight.mul_(scale)
        layers += [linear, act()]
    layers.append(nn.Linear(width, 1))
    return nn.Sequential(*layers)


def _healthy() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1)
    )


def _train(
    model: nn.Module,
    steps: int = 3,
    lr: float = 0.01,
    loss_scale: float = 1.0,
    **options: Any,
) -> Tracker:
    options.setdefault("stats", diagnosis_stats)
    torch.manual_seed(1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with track(model, **options) as t:
        for _ in range(steps):
            optimizer.zero_grad()
            (model(torch.randn(64, 32)).square().mean() * loss_scale).backward()
            optimizer.step()
            t.step()
    return t


def _checks(diagnosis: Diagnosis) -> list[str]:
    return [f.check for f in diagnosis]


def test_dead_fraction_by_hand() -> None:
    assert dead_fraction(torch.tensor([[0.0, 1.0], [0.0, 2.0]])).item() == 0.5
    tokens = torch.zeros(2, 3, 4)
    tokens[1, 2, 1] = 1.0  # unit 1 alive in one token of one example
    assert dead_fraction(tokens).item() == 0.75
    images = torch.zeros(2, 5, 3, 3)
    images[:, :2] = 1.0  # channels 0 and 1 alive
    assert dead_fraction(images).item() == pytest.approx(0.6)
    assert dead_fraction(torch.zeros(3)).item() == 1.0


@pytest.mark.slow
def test_a_healthy_model_has_no_finding() -> None:
    losses = [1.0 - 0.01 * i for i in range(30)]
    diagnosis = diagnose(_train(_healthy(), steps=5), loss=losses)
    assert len(diagnosis) == 0, str(diagnosis)
    assert "No findings." in str(diagnosis)
    assert set(diagnosis.checked) >= {"nonfinite", "gradients", "dead_units", "formats", "loss"}
    skipped = [k for k, v in diagnosis.checked.items() if v.startswith("skipped")]
    # No parameters recorded; no attention logits (no attention).
    assert skipped == ["update_size", "attention_logit_growth"]
    updates = diagnose(_train(_healthy(), steps=4, stats=None, capture=("outputs", "params")))
    assert len(updates) == 0, str(updates)
    assert updates.checked["update_size"].startswith("18 update(s) of 6 parameter(s)")


def _output_grads(model: nn.Sequential, names: list[str]) -> dict[str, Tensor]:
    """d loss / d output of each named child, by torch.autograd.grad on one step."""
    outputs: dict[str, Tensor] = {}
    hooks = [
        model.get_submodule(n).register_forward_hook(
            lambda m, a, out, n=n: outputs.__setitem__(n, out)
        )
        for n in names
    ]
    torch.manual_seed(1)
    loss = model(torch.randn(64, 32)).square().mean()
    for h in hooks:
        h.remove()
    grads = torch.autograd.grad(loss, [outputs[n] for n in names])
    return dict(zip(names, grads, strict=True))


def test_vanishing_gradients_in_a_deep_sigmoid_network() -> None:
    model = _mlp(nn.Sigmoid, depth=12)
    reference = _mlp(nn.Sigmoid, depth=12)
    diagnosis = diagnose(_train(model, steps=1, lr=0.0))
    found = [f for f in diagnosis if f.check == "vanishing_gradients"]
    assert len(found) == 1 and found[0].modules == ("0", "24") and found[0].steps == (0, 0)
    # 25 leaves, 6 at each end: the median rms of their output gradients.
    leaves = [str(i) for i in range(25)]
    grads = _output_grads(reference, leaves)
    rms = {n: g.double().square().mean().sqrt().item() for n, g in grads.items()}
    near_input = sorted(rms[n] for n in leaves[:6])
    near_output = sorted(rms[n] for n in leaves[-6:])
    want_in = (near_input[2] + near_input[3]) / 2
    want_out = (near_output[2] + near_output[3]) / 2
    evidence = found[0].evidence
    assert evidence["rms near input"] == pytest.approx(want_in, rel=1e-4)
    assert evidence["rms near output"] == pytest.approx(want_out, rel=1e-4)
    assert evidence["ratio"] == pytest.approx(want_in / want_out, rel=1e-4)
    assert "vanishing_gradients" not in _checks(diagnose(_train(_healthy(), steps=1, lr=0.0)))


def test_vanishing_gradients_from_full_copies_too() -> None:
    stats = diagnose(_train(_mlp(nn.Sigmoid, depth=12), steps=1, lr=0.0))
    copies = diagnose(_train(_mlp(nn.Sigmoid, depth=12), steps=1, lr=0.0, stats=None))
    assert "vanishing_gradients" in _checks(copies)
    assert copies[0].evidence["ratio"] == pytest.approx(stats[0].evidence["ratio"], rel=1e-4)


def test_gradients_exactly_zero_at_the_input_end() -> None:
    # The first two ReLUs never fire: no gradient at all reaches the first three modules.
    model = _mlp(nn.ReLU, depth=8)
    with torch.no_grad():
        model[0].bias.fill_(-1e3)
        model[2].bias.fill_(-1e3)
    found = [
        f for f in diagnose(_train(model, steps=2, lr=0.0)) if f.check == "vanishing_gradients"
    ]
    assert len(found) == 1 and found[0].evidence["ratio"] == 0.0
    assert "shrink to exactly 0" in found[0].explanation


def test_exploding_gradients_in_a_deep_linear_network() -> None:
    diagnosis = diagnose(_train(_mlp(nn.Identity, depth=12, scale=5.0), steps=1, lr=0.0))
    found = [f for f in diagnosis if f.check == "exploding_gradients"]
    assert len(found) == 1 and found[0].evidence["ratio"] > 1e3  # type: ignore[operator]
    assert "clip gradients" in found[0].suggestion


def test_dead_relu_units() -> None:
    torch.manual_seed(0)
    first = nn.Linear(32, 32)
    with torch.no_grad():
        first.bias[:8] = -1e3  # a quarter of the units never fire
        first.bias[8:] = 1e3
    model = nn.Sequential(first, nn.ReLU(), nn.Linear(32, 1))
    found = [f for f in diagnose(_train(model, steps=2, lr=0.0)) if f.check == "dead_units"]
    assert len(found) == 1
    assert found[0].modules == ("1",) and found[0].steps == (0, 1)
    assert found[0].evidence["dead fraction (worst)"] == 0.25
    assert not diagnose(_train(model, steps=1, lr=0.0), dead=0.3).findings


def test_dead_units_need_the_statistic_and_say_so() -> None:
    diagnosis = diagnose(_train(_healthy(), steps=1, stats=True))
    assert "diagnosis_stats" in diagnosis.checked["dead_units"]


@pytest.mark.parametrize("act", [nn.Tanh, nn.Sigmoid])
def test_saturated_activations(act: type[nn.Module]) -> None:
    model = _mlp(act, depth=2, scale=40.0)
    t = _train(model, steps=1, lr=0.0)
    found = [f for f in diagnose(t) if f.check == "saturation"]
    assert len(found) == 1 and set(found[0].modules) == {"1", "3"}
    # The mean slope by hand, from the recorded outputs' own values.
    outputs: dict[str, Tensor] = {}
    for name in ("1", "3"):
        model.get_submodule(name).register_forward_hook(
            lambda m, a, out, n=name: outputs.__setitem__(n, out.detach().double())
        )
    torch.manual_seed(1)
    model(torch.randn(64, 32))
    if act is nn.Tanh:
        slopes = [(1 - y.square()).mean().item() for y in outputs.values()]
    else:
        slopes = [(y * (1 - y)).mean().item() / 0.25 for y in outputs.values()]
    assert found[0].evidence["mean slope (worst)"] == pytest.approx(min(slopes), abs=1e-6)
    assert min(slopes) < 0.1
    assert not [f for f in diagnose(_train(_mlp(act, depth=2), steps=1)) if f.check == "saturation"]


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: Tensor) -> Tensor:
        return x * self.factor


def test_fp16_overflow_of_activations_by_fraction_and_by_abs_max() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), Scale(1e5), nn.Linear(32, 1))
    t = _train(model, steps=1, lr=0.0)
    found = [f for f in diagnose(t) if f.check == "fp16_overflow"]
    assert [f.explanation.split()[0] for f in found] == ["values", "gradients"]
    assert found[0].modules[0] == "1"
    # By hand: the fraction of |x * 1e5| above 65504 for the same batch.
    torch.manual_seed(1)
    y = model[1](model[0](torch.randn(64, 32)))
    fraction = (y.abs() > 65504).double().mean().item()
    assert found[0].evidence["overflow fraction (worst)"] == pytest.approx(fraction)
    assert "bf16_overflow" not in _checks(diagnose(t))
    plain = diagnose(_train(model, steps=1, lr=0.0, stats=True))
    found = [f for f in plain if f.check == "fp16_overflow"]
    assert found and found[0].evidence["largest abs_max"] == pytest.approx(y.abs().max().item())
    assert plain.checked["formats"] == (
        "read abs_max (for fp16, bf16) of the records of kind output and their gradients"
    )


def test_an_overflow_passed_on_unchanged_names_where_it_began_first() -> None:
    """Scale(1e6)'s output goes on through a Dropout, which overflows by a larger fraction
    (it scales what it keeps by 1/(1-p)), and a LayerNorm: the finding names them in the
    order they ran, the Scale first, where the problem began; the worst fraction stays in
    the evidence."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 32), Scale(1e5), nn.Dropout(0.5), nn.Linear(32, 32))
    t = _train(model, steps=1, lr=0.0)
    (found,) = [f for f in diagnose(t) if f.check == "fp16_overflow" and "values" in f.explanation]
    assert found.modules[:2] == ("1", "2")
    frame = t.to_frame()
    fractions = frame[~frame["grad"]].set_index("name")["fp16_overflow"]
    assert fractions["2"] > fractions["1"] > 0  # the Dropout's is larger
    assert found.evidence["overflow fraction (worst)"] == pytest.approx(fractions.max())


def test_fp16_underflow_of_gradients() -> None:
    diagnosis = diagnose(_train(_healthy(), steps=1, lr=0.0, loss_scale=1e-9))
    found = [f for f in diagnosis if f.check == "fp16_underflow"]
    assert len(found) == 1 and "GradScaler" in found[0].suggestion
    assert "gradients" in found[0].explanation
    assert "fp8_e4m3_overflow" not in _checks(diagnosis)


def _fp16_flushes(x: Tensor) -> float:
    """The fraction of `x` that is not zero but below float16's smallest subnormal."""
    tiny = torch.finfo(torch.float16).smallest_normal * torch.finfo(torch.float16).eps
    return ((x != 0) & (x.abs() < tiny)).double().mean().item()


def test_a_parameters_underflow_names_the_parameter_not_the_modules_outputs() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    with torch.no_grad():
        model[0].bias.fill_(1e-9)  # far below float16's smallest subnormal (6e-8)
    with track(model, stats=diagnosis_stats, capture=("outputs", "params")) as t:
        model(torch.randn(16, 8)).sum().backward()
    found = [f for f in diagnose(t) if f.check == "fp16_underflow"]
    assert len(found) == 1  # the outputs of "0" are O(1): no finding about them
    assert found[0].modules == ("0.bias",)
    assert found[0].explanation.startswith("values of 1 parameter(s) have values too small")
    # All 8 values of the bias flush to zero in float16.
    assert _fp16_flushes(model[0].bias.detach()) == 1.0
    assert found[0].evidence == {"parameters": 1.0, "underflow fraction (worst)": 1.0}
    assert "float32" in found[0].suggestion


def test_gradient_underflow_is_told_apart_for_outputs_inputs_and_parameters() -> None:
    model = _healthy()
    reference = _healthy()
    t = _train(model, steps=1, lr=0.0, loss_scale=1e-9, capture=("outputs", "inputs", "params"))
    found = [f for f in diagnose(t) if f.check == "fp16_underflow"]
    words = [f.explanation.split(" have ")[0] for f in found]
    assert words == [
        "gradients of 6 module(s)",  # the outputs of the model and of its 5 children
        "gradients of 4 module input(s)",  # the batch, input of "" and "0", has none
        "gradients of 6 parameter(s)",
    ]
    assert set(found[0].modules) == {"", "0", "1", "2", "3", "4"}
    assert set(found[1].modules) == {f"{n} input input" for n in "1234"}
    # The parameters' gradients by hand, on the same batch: all six flush to zero.
    torch.manual_seed(1)
    (reference(torch.randn(64, 32)).square().mean() * 1e-9).backward()
    fractions = {n: _fp16_flushes(p.grad) for n, p in reference.named_parameters()}
    assert (
        set(found[2].modules)
        == set(fractions)
        == {f"{i}.{a}" for i in "024" for a in ("weight", "bias")}
    )
    assert found[2].evidence["underflow fraction (worst)"] == max(fractions.values())
    assert min(fractions.values()) > 0.1


def test_format_overflow_of_a_weight_and_of_its_modules_outputs_are_two_findings() -> None:
    torch.manual_seed(0)
    first = nn.Linear(32, 32)
    with torch.no_grad():
        first.weight[0, 0] = 1e5  # one weight of 1024 above float16's largest, 65504
    model = nn.Sequential(first, nn.Linear(32, 1))
    t = _train(model, steps=1, lr=0.0, capture=("outputs", "params"))
    values = [
        f for f in diagnose(t) if f.check == "fp16_overflow" and f.explanation.startswith("values")
    ]
    assert [f.modules for f in values] == [("0",), ("0.weight",)]
    assert "1 module(s) exceed" in values[0].explanation
    assert "1 parameter(s) exceed" in values[1].explanation
    assert values[1].evidence["overflow fraction (worst)"] == 1 / 1024
    torch.manual_seed(1)
    out = first(torch.randn(64, 32))  # the batch `_train` feeds
    fraction = (out.abs() > 65504).double().mean().item()
    assert values[0].evidence["overflow fraction (worst)"] == pytest.approx(fraction)


def test_output_checks_read_outputs_only() -> None:
    # Dead units, saturation and the gradient ratio are about what modules output: a zero
    # bias (dead_frac 1) or a batch with zero features is not a dead unit.
    model = _mlp(nn.Tanh, depth=3)
    with torch.no_grad():
        for layer in model[::2]:
            layer.bias.zero_()
    options = {"stats": diagnosis_stats, "capture": ("outputs", "inputs", "params")}
    torch.manual_seed(1)
    batch = torch.randn(64, 32)
    batch[:, :16] = 0.0  # half the input features are zero for the whole batch
    with track(model, **options) as t:
        model(batch).square().mean().backward()
    frame = t.to_frame()
    assert (frame[frame["kind"] != "output"]["dead_frac"] >= 0.25).any()  # would be found
    diagnosis = diagnose(t)
    assert "dead_units" not in _checks(diagnosis) and "saturation" not in _checks(diagnosis)
    with track(model, stats=diagnosis_stats) as outputs_only:
        model(batch).square().mean().backward()
    assert diagnosis.checked["gradients"] == diagnose(outputs_only).checked["gradients"]


@pytest.mark.parametrize(("lr", "word"), [(1e-8, "far below"), (30.0, "far above")])
def test_update_size_against_parameter_size(lr: float, word: str) -> None:
    model = _healthy()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    t = _train(model, steps=2, lr=lr, stats=None, capture=("outputs", "params"))
    found = [f for f in diagnose(t) if f.check == "update_size"]
    assert len(found) == 1 and word in found[0].explanation
    # The recorded parameters are those before each step: step 0's are `before`, step 1's
    # are after one update.
    after = {
        n: s.value
        for s in t
        if s.kind == "param" and s.step == 1 and not s.grad
        for n in [f"{s.name}.{s.attr}"]
    }
    ratios = sorted(
        (
            (after[n] - before[n]).double().square().mean().sqrt()
            / before[n].double().square().mean().sqrt()
        ).item()
        for n in before
    )
    assert found[0].evidence["update/parameter rms (median)"] == pytest.approx(
        (ratios[2] + ratios[3]) / 2, rel=1e-6
    )
    assert found[0].steps == (0, 0)


def test_update_size_needs_parameter_copies() -> None:
    t = _train(_healthy(), steps=2, capture=("outputs", "params"))
    assert "copies" in diagnose(t).checked["update_size"]


def test_loss_spikes() -> None:
    losses = [1.0 - 0.001 * i + 0.002 * (i % 3) for i in range(50)]
    losses[30] = 5.0
    losses[40] = math.nan
    diagnosis = diagnose(_train(_healthy(), steps=1), loss=losses)
    found = [f for f in diagnosis if f.check == "loss_spike"]
    assert len(found) == 1 and found[0].steps == (30, 40)
    assert found[0].evidence["spikes"] == 2 and found[0].evidence["worst step"] == 30
    assert found[0].evidence["loss there"] == 5.0
    by_step = diagnose(_train(_healthy(), steps=1), loss={s: v for s, v in enumerate(losses)})
    assert [f.steps for f in by_step if f.check == "loss_spike"] == [(30, 40)]


def test_a_nan_is_a_finding_with_its_origin() -> None:
    class Log(nn.Module):
        def forward(self, x: Tensor) -> Tensor:
            return torch.log(x)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 8), Log(), nn.Linear(8, 1))
    found = diagnose(_train(model, steps=1, lr=0.0))[0]
    assert (found.check, found.modules, found.steps) == ("nonfinite", ("1",), (0, 0))


def test_renderings_and_the_frame() -> None:
    diagnosis = diagnose(_train(_mlp(nn.Sigmoid, depth=12), steps=1, lr=0.0))
    text = str(diagnosis)
    assert "vanishing_gradients [0, 24] steps 0" in text and "Checked:" in text
    assert repr(diagnosis) == "Diagnosis(2 finding(s): vanishing_gradients, fp16_underflow)"
    page = diagnosis._repr_html_()
    assert "<table>" in page and "vanishing_gradients" in page
    frame = diagnosis.to_frame()
    assert list(frame.columns) == [
        "check",
        "modules",
        "steps",
        "evidence",
        "explanation",
        "suggestion",
    ]
    assert len(frame) == len(diagnosis)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"formats": ["fp4"]}, ValueError, "formats="),
        ({"block_error": 0.0}, ValueError, "block_error="),
        ({"vanishing": 2.0}, ValueError, "vanishing="),
        ({"dead": "half"}, TypeError, "dead="),
        ({"update_size": (1.0, 0.1)}, ValueError, "update_size="),
    ],
)
def test_bad_arguments_are_named(options: dict[str, Any], error: type, match: str) -> None:
    t = _train(_healthy(), steps=1)
    with pytest.raises(error, match=match):
        diagnose(t, **options)
    with pytest.raises(TypeError, match="recording"):
        diagnose(3)


def test_an_empty_recording() -> None:
    with track(_healthy(), stats=True) as t:
        pass
    assert diagnose(t).checked == {"all": "skipped: nothing was recorded"}


def _outlier_model() -> nn.Sequential:
    # The first layer's output channel 5 is 300x the others from step 1 on: every block of
    # 32 holding it is scaled for it, and the small values beside it lose their bits.
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))


def _with_outlier(model: nn.Sequential, steps: int, **options: Any) -> Tracker:
    torch.manual_seed(1)
    with track(model, **options) as t:
        for step in range(steps):
            if step == 1:
                with torch.no_grad():
                    model[0].weight[5] *= 300
                    model[0].bias[5] = 300.0
            model(torch.randn(64, 32)).square().mean().backward()
            model.zero_grad()
            t.step()
    return t


BLOCK_STATS = ["rms", "mxfp4_e2m1_error", "mxfp4_e2m1_underflow", "mxfp8_e4m3_underflow"]


@pytest.mark.parametrize("source", ["stats", "copies"])
def test_block_format_underflow_names_the_modules_and_their_worst_steps(source: str) -> None:
    options: dict[str, Any] = {"stats": BLOCK_STATS} if source == "stats" else {}
    t = _with_outlier(_outlier_model(), steps=3, **options)
    diagnosis = diagnose(t, formats=["mxfp4_e2m1", "mxfp8_e4m3"])
    values = [
        f for f in diagnosis if f.check == "mxfp4_e2m1_underflow" and "values" in f.explanation
    ]
    assert len(values) == 1
    finding = values[0]
    # Linear 0's output and the ReLU after it hold the outlier channel; step 0 does not.
    assert set(finding.modules) == {"0", "1"}
    assert finding.steps == (1, 2)
    assert finding.evidence["worst steps"] in ("1, 2", "2, 1")
    name = "mxfp4_e2m1_underflow"
    frame = t.to_frame(stat=name, stat_name=name) if source == "copies" else t.to_frame()
    outputs = frame[(frame["kind"] == "output") & ~frame["grad"]]
    worst = outputs[outputs["name"] == finding.modules[0]][name].max()
    assert finding.evidence["underflow fraction (worst)"] == pytest.approx(worst)
    assert worst > 0.4
    # The same blocks lose nothing in MXFP8, and the outlier hardly moves the error
    # (the largest values dominate it).
    assert "mxfp8_e4m3_underflow" not in _checks(diagnosis)
    assert "mxfp4_e2m1_error" not in _checks(diagnosis)


def test_block_format_error_of_values_saturating_under_the_block_scale() -> None:
    # tanh outputs crowd near ±0.99: the MX scale 2**(floor(log2 0.99) - 8) maps them to
    # ~507, past E4M3's 448, so they saturate: ~10% error, over 3x E4M3's floor.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
    with torch.no_grad():
        model[0].weight.mul_(5.0)  # most outputs in 0.9-0.9999; 20x would make them 1.0
    stats = ["rms", "mxfp8_e4m3_error", "mxfp8_e4m3_underflow"]
    t = _train(model, steps=2, lr=0.0, stats=stats)
    found = [f for f in diagnose(t, formats=["mxfp8_e4m3"]) if f.check == "mxfp8_e4m3_error"]
    assert [f.modules for f in found if "values" in f.explanation] == [("1",)]
    finding = found[0]
    assert finding.evidence["error (worst)"] > 3 * 0.0293
    assert finding.evidence["threshold"] == pytest.approx(2 * 0.0293)
    assert finding.steps == (0, 1)


def test_block_format_thresholds() -> None:
    t = _with_outlier(_outlier_model(), steps=1, stats=BLOCK_STATS)  # no outlier yet
    assert not [c for c in _checks(diagnose(t, formats=["mxfp4_e2m1"])) if "mxfp4" in c]
    t = _with_outlier(_outlier_model(), steps=2, stats=BLOCK_STATS)
    assert "mxfp4_e2m1_underflow" in _checks(diagnose(t, formats=["mxfp4_e2m1"]))
    found = _checks(diagnose(t, formats=["mxfp4_e2m1"], block_error=1e6, underflow=1.0))
    assert not [c for c in found if "mxfp4" in c]
    # block statistics not recorded: said so, nothing invented
    t = _train(_healthy(), steps=1, stats=True)
    diagnosis = diagnose(t, formats=["nvfp4"])
    assert "skipped" in diagnosis.checked["formats"]


@pytest.mark.parametrize(("lr", "word"), [(1e-9, "far below"), (3.0, "far above")])
def test_update_size_from_update_records(lr: float, word: str) -> None:
    # capture="updates" records the optimizer's updates as statistics: no copies needed.
    model = _healthy()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    with track(model, stats=["rms"], capture="updates", optimizer=optimizer) as t:
        for _ in range(2):
            model(torch.randn(64, 32)).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
            t.step()
    frame = t.to_frame()
    ratios = frame[frame["kind"] == "update_ratio"]["rms"]
    (found,) = [f for f in diagnose(t) if f.check == "update_size"]
    assert word in found.explanation and len(found.modules) == 6
    assert found.evidence["update/parameter rms (median)"] == pytest.approx(ratios.median())
    assert diagnose(t).checked["update_size"].startswith("12 update(s) of 6 parameter(s)")


def test_the_verdict_ranks_what_breaks_a_run_first() -> None:
    class Boost(nn.Module):  # a layer whose output is a million times too large
        def forward(self, x: Tensor) -> Tensor:
            return x * 1e6

    torch.manual_seed(0)
    model = nn.Sequential(*_mlp(nn.Sigmoid, depth=12)[:-1], Boost(), nn.Linear(32, 1))
    diagnosis = diagnose(_train(model, steps=1, lr=0.0))
    # Found in the order of the checks; ranked: the overflow before the slower harms.
    assert _checks(diagnosis)[0] == "vanishing_gradients"
    ranked = diagnosis.ranked()
    # The gradients overflow too, at more modules: they come first.
    assert [f.check for f in ranked[:2]] == ["fp16_overflow", "fp16_overflow"]
    assert len(ranked[0].modules) > len(ranked[1].modules) and ranked[1].modules[0] == "24"
    verdict = diagnosis.verdict()
    assert verdict[1].startswith(
        "2. 24 (+2 more), step 0: values of 3 module(s) exceed the largest"
    )
    assert len(verdict) == len(diagnosis)
    lines = str(diagnosis).splitlines()
    assert lines[0] == f"{len(diagnosis)} finding(s), most severe first:"
    assert lines[1 : 1 + len(verdict)] == verdict  # the summary before the details
    assert lines[1 + len(verdict)] == "Details:"
    assert "24 (+2 more), step 0: values of 3 module(s) exceed" in diagnosis._repr_html_()


def test_the_verdict_of_a_clean_run_counts_the_checks() -> None:
    diagnosis = diagnose(_train(_healthy(), steps=2))
    ran = [k for k, v in diagnosis.checked.items() if not v.startswith("skipped")]
    skipped = len(diagnosis.checked) - len(ran)  # update sizes, attention logits: not recorded
    assert skipped == 2 and diagnosis.verdict() == [
        f"No problems found by {len(ran)} checks ({skipped} skipped: see checked)."
    ]
    assert str(diagnosis).splitlines()[1] == diagnosis.verdict()[0]
    assert "No problems found by" in diagnosis._repr_html_()
