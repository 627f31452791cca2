"""Zero-code capture end to end: unmodified PyTorch programs (Hugging Face transformers models
with tiny configs, torchrun with Gloo, torch.profiler) run under `moescope record`, and what the
report and the exported trace say is compared with what the program did.

usage: autocapture_test.py --case NAME --moescope BIN --programs DIR --work DIR
Exit 0 pass, 1 fail, 77 skipped (a Python package is missing), with the reason on stdout.
"""

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "compat"))
from compat_harness import (  # noqa: E402
    Failure, Skip, chrome_events, once_more_on_teardown_abort, run_command)

PYTHON = sys.executable
SKIP = 77


class Context:
    def __init__(self, args):
        self.moescope, self.programs, self.work = args.moescope, args.programs, args.work
        os.makedirs(self.work, exist_ok=True)
        for name in os.listdir(self.work):
            if name.endswith((".moetrace", ".json")):
                os.remove(os.path.join(self.work, name))
        self.env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
                        HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")

    def program(self, name):
        return os.path.join(self.programs, name)

    def record(self, command, pattern="run.%r.moetrace", options=(), normalize=lambda text: text):
        """Runs `command` plain and recorded: same exit status and (normalized) stdout."""
        plain = run_command(command, self.env, 600)
        recorded = run_command([self.moescope, "record", "-o", os.path.join(self.work, pattern),
                                *options, "--", *command], self.env, 600)
        if (plain.returncode != recorded.returncode
                or normalize(plain.stdout) != normalize(recorded.stdout)):
            raise Failure(f"plain and recorded runs differ: exit {plain.returncode} vs "
                          f"{recorded.returncode}\n--- plain\n{plain.stdout}{plain.stderr}\n"
                          f"--- recorded\n{recorded.stdout}{recorded.stderr}")
        if plain.returncode != 0:
            raise Failure(f"the program failed:\n{plain.stderr}")
        return recorded

    def traces(self):
        return sorted(os.path.join(self.work, name) for name in os.listdir(self.work)
                      if name.endswith(".moetrace"))

    def report(self, traces=None, options=()):
        done = subprocess.run([self.moescope, "report", "--format", "json", "--quiet", *options,
                               *(traces or self.traces())], capture_output=True, text=True,
                              timeout=300)
        if done.returncode != 0:
            raise Failure(f"moescope report failed: {done.stderr}")
        return json.loads(done.stdout)


def need(*modules):
    for module in modules:
        try:
            __import__(module)
        except ImportError as error:
            raise Skip(f"python module {module} is missing ({error}); scripts/setup.sh "
                       "installs it") from error


def expect(condition, message):
    if not condition:
        raise Failure(message)


def span_counts(context, trace):
    """(domain, name) -> spans, for the capture's own domains (moescope.phase, .module)."""
    counts = collections.Counter()
    for event in chrome_events(context, trace):
        domain = str(event.get("args", {}).get("domain", ""))
        if event.get("ph") in ("X", "B") and domain.startswith("moescope."):
            counts[(domain, event.get("name"))] += 1
    return counts


def imbalance_findings(report):
    return [finding for finding in report["findings"] if finding["kind"] == "expert_imbalance"]


# ---- cases -------------------------------------------------------------------------------------

def hf_model_case(family):
    """A transformers MoE model trained 20 steps by an ordinary loop: 20 steps, phases, module
    spans by path, and the biased router's layer reported imbalanced toward its expert."""
    def case(context):
        need("torch", "transformers")
        steps = 20
        context.record([PYTHON, context.program("hf_moe_train.py"), family, str(steps)],
                       pattern="hf.moetrace")
        report = context.report()
        expect(report["summary"]["steps"] == steps,
               f"{report['summary']['steps']} steps reported, {steps} run")
        expect(report["summary"]["step_source"] == "step markers", report["summary"])
        spans = span_counts(context, context.traces()[0])
        for phase in ("forward", "backward", "optimizer"):
            expect(spans[("moescope.phase", phase)] == steps,
                   f"{spans[('moescope.phase', phase)]} '{phase}' phases for {steps} steps")
        modules = {name for (domain, name) in spans if domain == "moescope.module"}
        expect(any(name.startswith("model.layers.1.") for name in modules),
               f"no module span of the decoder layers: {sorted(modules)}")
        findings = imbalance_findings(report)
        hot = [f for f in findings if f["where"]["layer"] == 1 and 3 in f["where"]["experts"]]
        # Severity is the share of the step a finding costs (docs/analysis.md), small on a tiny
        # CPU model; what the bias must show is the imbalance itself, and that it ranks first.
        expect(hot and hot[0]["metrics"]["max_over_mean"] >= 3.0,
               f"no expert_imbalance on layer 1 naming expert 3 with max/mean >= 3: {findings}")
        expect(hot and all(f["est_ms_per_step"] <= hot[0]["est_ms_per_step"] for f in findings),
               f"layer 1's imbalance is not the costliest: {findings}")
        expect(not any(3 in f["where"]["experts"] for f in findings if f["where"]["layer"] != 1),
               f"expert 3 is named on a layer whose router was not biased: {findings}")
    case.__doc__ = hf_model_case.__doc__
    return case


def gradient_bytes(context, family):
    """Bytes of each fp32 gradient of hf_moe_train.py's tiny model, the size of its all_reduces."""
    import transformers
    sys.path.insert(0, context.programs)
    import hf_moe_train
    model = transformers.AutoModelForCausalLM.from_config(hf_moe_train.tiny_config(family))
    return [p.numel() * 4 for p in model.parameters() if p.requires_grad]


def record_hf_torchrun(context, steps):
    """hf_moe_train.py's tiny Mixtral on 2 Gloo ranks under torchrun, plain and recorded."""
    # Two ranks print to one pipe: their lines may interleave, even within a line.
    context.record([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    "2", context.program("hf_moe_train.py"), "mixtral", str(steps)],
                   normalize=lambda text: sorted(re.findall(r"step \d+ loss [\d.]+", text)))


def torchrun_gloo_training(context):
    """2 ranks, gradients averaged with Gloo all_reduce by hand: every all_reduce on each rank
    with the bytes of its gradient; the biased layer's imbalance stops its chain at the layer."""
    need("torch", "transformers")
    steps = 3
    record_hf_torchrun(context, steps)
    traces = context.traces()
    expect(len(traces) == 2, f"expected 2 traces, got {traces}")
    grads = gradient_bytes(context, "mixtral")
    for trace in traces:
        ops = [event for event in chrome_events(context, trace) if event.get("ph") == "X"
               and event.get("args", {}).get("kind") == "all_reduce"]
        expect(len(ops) == len(grads) * steps,
               f"{trace}: {len(ops)} all_reduce ops, expected {len(grads) * steps}")
        sent = sorted(int(op["args"]["bytes"]) for op in ops)
        expect(sent == sorted(grads * steps), f"{trace}: bytes per all_reduce differ")
    report = context.report()
    expect(report["summary"]["steps"] == steps, report["summary"])
    # Data parallel, no expert parallelism: every rank computes every expert, so the trace shows
    # no placement and the biased layer's finding links to no rank, and says why.
    hot = [f for f in imbalance_findings(report) if f["where"]["layer"] == 1]
    expect(hot and "the chain stops at layer 1" in hot[0]["chain"] and not hot[0]["explains"],
           f"layer 1's imbalance does not stop its chain at the layer: {hot}")


def gloo_collectives(context):
    """Each collective on each rank with the bytes the program sent, and all_to_all_single with
    uneven splits as the exact matrix."""
    need("torch")
    recorded = context.record([PYTHON, "-m", "torch.distributed.run", "--standalone",
                               "--nproc_per_node", "2", context.program("gloo_collectives.py")],
                              normalize=lambda text: sorted(text.splitlines()))
    sent = {}
    for line in recorded.stdout.splitlines():
        entry = json.loads(line)
        sent[entry["rank"]] = dict((kind, value) for kind, value in entry["sent"])
    report = context.report()
    by_kind = collections.defaultdict(int)
    for op in report["communication"]["ops"]:
        by_kind[op["kind"]] += op["bytes"]
    for kind in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
        expected = sent[0][kind] + sent[1][kind]
        expect(by_kind[kind] == expected, f"{kind}: {by_kind[kind]} bytes recorded, {expected} sent")
    matrices = report["communication"]["all_to_all"]
    expect(len(matrices) == 1, f"expected one all-to-all matrix, got {matrices}")
    expect(matrices[0]["bytes"] == [sent[0]["all_to_all"], sent[1]["all_to_all"]],
           f"all-to-all matrix {matrices[0]['bytes']}, sent {sent[0]['all_to_all']}, "
           f"{sent[1]['all_to_all']}")


def record_late_rank(context, sleep_ms, rounds):
    """gloo_late_rank.py on 2 Gloo ranks, plain and recorded: how many ms after rank 0 rank 1
    called each all-to-all in the recorded run. A sleep of 80 ms can overrun by tens of ms when
    the machine is loaded (CI once measured a 91.9 ms wait): a wait is checked against this, not
    against the sleep."""
    times = os.path.join(context.work, "entered")
    context.record([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    "2", context.program("gloo_late_rank.py"), str(sleep_ms / 1e3), str(rounds),
                    times])
    entered = []
    for rank in (0, 1):
        with open(f"{times}.{rank}.json") as handle:
            entered.append(json.load(handle))
    late_ms = [(one - zero) * 1e-6 for zero, one in zip(*entered)]
    expect(len(late_ms) == rounds and all(late >= 0.9 * sleep_ms for late in late_ms),
           f"rank 1 was not late by the sleep at every all-to-all: {late_ms}")
    return late_ms


def gloo_late_rank_wait(context):
    """Rank 1 sleeps 80 ms before each of 5 all-to-alls: the report splits rank 0's time inside
    them into waiting for rank 1 (how late it called them, within 10% of the sleep) and transfer,
    and blames rank 1."""
    need("torch")
    sleep_ms, rounds = 80.0, 5
    late_ms = record_late_rank(context, sleep_ms, rounds)
    report = context.report()
    waits = [kind for kind in report["communication"]["wait_transfer"]
             if kind["kind"] == "all_to_all"]
    expect(len(waits) == 1, f"no all_to_all wait/transfer: {report['communication']}")
    ranks = {entry["rank"]: entry for entry in waits[0]["ranks"]}
    expect(waits[0]["matched_ops"] == rounds and set(ranks) == {0, 1},
           f"expected {rounds} all-to-alls matched on ranks 0 and 1: {waits[0]}")
    waited, late = ranks[0]["mean_wait_ms"], sum(late_ms) / rounds
    expect(abs(waited - late) <= 0.1 * sleep_ms,
           f"rank 0 waited {waited:.1f} ms per all-to-all, rank 1 was {late:.1f} ms late: "
           f"{waits[0]}")
    expect(ranks[1]["mean_wait_ms"] < 0.1 * sleep_ms,
           f"rank 1 arrived last but waited {ranks[1]['mean_wait_ms']:.1f} ms: {waits[0]}")
    expect(ranks[1]["arrived_last"] == rounds, f"rank 1 was not last every time: {waits[0]}")
    expect(ranks[0]["mean_transfer_ms"] < sleep_ms / 2,
           f"transfer {ranks[0]['mean_transfer_ms']:.1f} ms holds part of the wait: {waits[0]}")


def annotation_without_step(context):
    """moescope.expert_load(layer, counts) without step= in a loop of 8 NVTX step ranges: the
    samples go to the step in progress, not all into step 0."""
    need("torch", "nvtx")
    source_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    context.env["PYTHONPATH"] = os.path.join(source_root, "profiler", "python")  # as installed
    context.record([PYTHON, context.program("nvtx_steps_annotated.py")], pattern="nvtx.moetrace",
                   options=["--no-python"])
    report = context.report()
    expect(report["summary"]["steps"] == 8, report["summary"])
    layers = report["expert_load"]
    expect(layers and layers[0]["steps"] == 8, f"expert load over {layers}")


def kineto_optimizer_steps(context):
    """A torch.profiler trace without prof.step(): 8 steps from the optimizer annotations, not
    one per repeated inner range."""
    need("torch")
    trace = os.path.join(context.work, "kineto.json")
    subprocess.run([PYTHON, context.program("profiler_optimizer_steps.py"), trace], check=True,
                   env=context.env, timeout=600)
    report = context.report([trace])
    expect(report["summary"]["steps"] == 8, report["summary"])
    expect(report["summary"]["step_source"] == "optimizer steps", report["summary"])


def chained_sitecustomize(context):
    """A program whose environment has its own sitecustomize: it still runs, once."""
    site = os.path.join(context.work, "their_site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
        handle.write("print('their sitecustomize ran')\n")
    context.env["PYTHONPATH"] = site
    recorded = context.record([PYTHON, "-c", "print('program ran')"], pattern="site.moetrace")
    expect(recorded.stdout == "their sitecustomize ran\nprogram ran\n", recorded.stdout)


def viewer_screenshots(context):
    """The viewer on an autocaptured 2-rank run (real window under xvfb-run): the expert
    heatmap's layer-1 cell of the biased expert is the hottest, the imbalance plot has every
    step, and the timeline finds the module spans, the phases and the Gloo all_reduces."""
    need("torch", "transformers", "PIL")
    from PIL import Image
    viewer = os.path.join(os.path.dirname(context.moescope), "moescope-view")
    if not os.path.exists(viewer):
        raise Skip("moescope-view is not built (MOESCOPE_WITH_VIEWER=OFF)")
    if shutil.which("xvfb-run") is None:
        raise Skip("xvfb-run is missing; scripts/setup.sh installs xvfb")
    steps = 4
    record_hf_torchrun(context, steps)
    traces = context.traces()

    def render(panel, *extra):
        png = os.path.join(context.work, "_".join((panel, *extra[1:])) + ".png")
        done = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24", viewer, *traces,
                               "--screenshot", png, "--panel", panel, "--size", "1280x800",
                               *extra], capture_output=True, text=True, timeout=300)
        expect(done.returncode == 0, f"moescope-view {panel} {extra}: {done.stdout}{done.stderr}")
        with open(png + ".layout.json") as handle:
            layout = json.load(handle)
        return Image.open(png).convert("RGB"), layout

    image, layout = render("experts")
    shown = layout["shown"]
    expect(shown["heatmap_layers"] == [0, 1], f"heatmap layers {shown['heatmap_layers']}")
    expect(shown["imbalance_steps"] == list(range(steps)),
           f"imbalance plot steps {shown['imbalance_steps']}, {steps} run")
    grid = layout["expert_heatmap"]

    def brightness(row, column):
        r, g, b = image.getpixel((int(grid["left"] + (column + 0.5) * grid["cell_width"]),
                                  int(grid["top"] + (row + 0.5) * grid["cell_height"])))
        return 0.299 * r + 0.587 * g + 0.114 * b

    cells = {(row, column): brightness(row, column)
             for row in range(grid["rows"]) for column in range(grid["columns"])}
    hot = cells[(1, 3)]
    expect(hot >= max(cells.values()) - 3, f"layer 1 expert 3 is not the hottest cell: {cells}")
    expect(all(value < hot - 40 for (row, _), value in cells.items() if row == 0),
           f"a layer-0 cell is as hot as the biased one: {cells}")
    for query in ("model.layers.1.", "backward", "all_reduce"):
        _, layout = render("timeline", "--search", query)
        expect(layout["selected_track"] >= 0, f"the timeline's search finds no '{query}'")

    # The first screen: the summary above the timeline, with the report's numbers.
    image, layout = render("timeline")
    summary, report = layout["shown"]["summary"], context.report(traces)
    expect(summary["drawn"] and summary["bottom"] < layout["timeline_area_y"],
           f"no summary above the timeline: {summary}")
    ranks = [rank["mean_per_step"] for rank in report["breakdown"]]
    for i, part in enumerate(("step_ms", "compute_ms", "exposed_communication_ms", "memcpy_ms",
                              "idle_ms")):
        mean = sum(rank[part] for rank in ranks) / len(ranks)
        expect(abs(summary["breakdown"][i] - mean) <= 1e-9 * max(1.0, mean),
               f"summary {part} {summary['breakdown'][i]} vs the report's {mean}")
    expect(summary["hottest"][:2] == [1, 3], f"hottest cell {summary['hottest']}, not layer 1 "
           "expert 3 (the biased one)")
    if report["findings"]:
        expect(summary["chain_ids"][:1] == [1], f"the chain starts at {summary['chain_ids']}")
    x0, y0, width, height = summary["bar"]
    compute_end = summary["bar_ends"][0]
    expect(compute_end - x0 > 4, f"no compute in the step-time bar: {summary}")
    expect(image.getpixel((int(0.5 * (x0 + compute_end)), int(y0 + 0.5 * height))) == (70, 130, 220),
           "the step-time bar's compute part is not drawn where the layout says")
    docs_copy = os.environ.get("MOESCOPE_FIRST_SCREEN_PNG")
    if docs_copy:  # how docs/images/viewer-first-screen.png is made
        image.save(docs_copy)


def viewer_wait_shading(context):
    """The timeline shades the part of each all-to-all that waits for the late rank: on the
    Gloo run where rank 1 sleeps 80 ms before each of 5 all-to-alls, rank 0's 5 ops each have a
    shade, in the wait colour, as long as rank 1 was late (the program's own clock readings at
    each call, within 10% of the sleep), rank 1's (it arrives last) none longer than half of it."""
    need("torch", "PIL")
    from PIL import Image
    viewer = os.path.join(os.path.dirname(context.moescope), "moescope-view")
    if not os.path.exists(viewer):
        raise Skip("moescope-view is not built (MOESCOPE_WITH_VIEWER=OFF)")
    if shutil.which("xvfb-run") is None:
        raise Skip("xvfb-run is missing; scripts/setup.sh installs xvfb")
    sleep_ms, rounds = 80.0, 5
    late_ms = record_late_rank(context, sleep_ms, rounds)
    png = os.path.join(context.work, "timeline.png")
    done = subprocess.run(["xvfb-run", "-a", "-s", "-screen 0 1280x1024x24", viewer,
                           *context.traces(), "--screenshot", png, "--panel", "timeline",
                           "--size", "1280x1000"],
                          capture_output=True, text=True, timeout=300)
    expect(done.returncode == 0, f"moescope-view: {done.stdout}{done.stderr}")
    with open(png + ".layout.json") as handle:
        layout = json.load(handle)
    image = Image.open(png).convert("RGB")
    ns_per_px = (layout["timeline_end_ns"] - layout["timeline_start_ns"]) / layout["timeline_width"]
    # The barrier before the loop may wait on either rank (tens of ms on a loaded 2-core
    # machine: a helper's build once gave a sixth shade over 8 ms); the sleeps wait 80 ms.
    shades = [shade for shade in layout["wait_shades"]
              if (shade[2] - shade[1]) * ns_per_px * 1e-6 >= 0.5 * sleep_ms]
    expect(sorted(shade[0] for shade in shades) == [0] * rounds,
           f"expected {rounds} all-to-alls shaded over 40 ms, all on rank 0: {layout['wait_shades']}")
    for (rank, start, wait_end, end, y), late in zip(sorted(shades, key=lambda s: s[1]), late_ms):
        waited_ms = (wait_end - start) * ns_per_px * 1e-6
        expect(abs(waited_ms - late) <= 0.1 * sleep_ms + ns_per_px * 2e-6,
               f"a shade of {waited_ms:.1f} ms where rank 1 was {late:.1f} ms late: {shades}")
        # The op's name is written over it: most of the part, not every pixel, is the shade.
        pixels = [image.getpixel((x, int(y) + dy)) for x in range(int(start) + 1, int(wait_end))
                  for dy in (-4, 0, 4)]
        shaded = sum(pixel == (150, 78, 24) for pixel in pixels) / max(1, len(pixels))
        expect(shaded >= 0.5, f"{shaded:.0%} of the wait part at x {start:.0f}..{wait_end:.0f} "
               "is in the wait colour")


# ---- issue 26: what real training scripts hit ------------------------------------------------

def moe_layer_totals(report):
    """layer -> tokens summed over its experts and the run, from the report's expert load."""
    return {layer["layer"]: sum(layer["tokens"]) for layer in report["expert_load"]}


def warnings_in(text):
    """The warning lines of a stderr ("...: UserWarning: ...", "moescope: ...")."""
    return sorted(line for line in text.splitlines() if "Warning:" in line)


def torch_compile_case(backend):
    """torch.compile of a tiny HF Mixtral: the same Dynamo graphs, graph breaks, recompiles
    (torch._dynamo.utils.counters) and loss with and without `moescope record`, no warning
    of ours, and expert load counted inside the compiled graph (every token of every step)."""
    def case(context):
        need("torch", "transformers")
        steps = 3
        command = [PYTHON, context.program("compiled_moe_train.py"), backend, str(steps)]
        plain_run = run_command(command, context.env, 900)
        recorded = run_command([context.moescope, "record", "-o",
                                os.path.join(context.work, "compiled.moetrace"), "--", *command],
                               context.env, 900)
        expect(plain_run.returncode == 0 and recorded.returncode == 0,
               f"rc {plain_run.returncode} / {recorded.returncode}\n{plain_run.stderr}\n"
               f"{recorded.stderr}")
        plain_stats = json.loads(plain_run.stdout.strip().splitlines()[-1])
        stats = json.loads(recorded.stdout.strip().splitlines()[-1])
        expect(stats == plain_stats, f"Dynamo differs under moescope record: {stats}, plain "
               f"{plain_stats}")
        ours = [line for line in warnings_in(recorded.stderr)
                if line not in warnings_in(plain_run.stderr)]
        expect(not ours and "moescope:" not in recorded.stderr,
               f"warnings only under moescope record: {ours}\n{recorded.stderr}")
        report = context.report()
        expect(report["summary"]["steps"] == steps, report["summary"])
        totals = moe_layer_totals(report)
        # 4 sequences of 32 tokens, top-2, every step, counted once each.
        expected = steps * 4 * 32 * 2
        expect(totals == {0: expected, 1: expected},
               f"expert load {totals}, expected {expected} per layer")
        expect(not report["capture_gaps"], f"capture gaps: {report['capture_gaps']}")
        spans = span_counts(context, context.traces()[0])
        expect(spans[("moescope.phase", "forward")] == steps, f"phases {spans}")
    case.__doc__ = torch_compile_case.__doc__
    return case


def checkpoint_case(mode):
    """Activation checkpointing: the recomputed forwards are `recompute` phases inside
    backward, one backward per step (no nested one), the phases add up to the step, and every
    token is counted once."""
    def case(context):
        need("torch", "transformers")
        steps = 6
        context.record([PYTHON, context.program("checkpoint_train.py"), mode, str(steps)],
                       pattern="checkpoint.moetrace")
        report = context.report()
        expect(report["summary"]["steps"] == steps, report["summary"])
        spans = span_counts(context, context.traces()[0])
        for phase in ("forward", "backward", "optimizer"):
            expect(spans[("moescope.phase", phase)] == steps,
                   f"{spans[('moescope.phase', phase)]} '{phase}' phases for {steps} steps")
        # Both decoder layers are recomputed in every backward (transformers 5 recomputes a
        # layer's parts one call each, so a layer can give several recompute spans).
        expect(spans[("moescope.phase", "recompute")] >= 2 * steps,
               f"{spans[('moescope.phase', 'recompute')]} recompute phases for {steps} steps")
        phases = report["phases"]
        expect(len(phases) == 1, f"phases {phases}")
        entry = phases[0]
        parts = sum(entry[f"{name}_ms"] for name in
                    ("forward", "backward", "recompute", "optimizer", "other"))
        expect(abs(parts - entry["step_ms"]) <= 1e-6 * entry["step_ms"] + 1e-9,
               f"phases add up to {parts} ms, the step is {entry['step_ms']} ms: {entry}")
        expect(entry["recompute_ms"] > 0 and entry["other_ms"] >= 0, entry)
        expected = steps * 4 * 32 * 2
        totals = moe_layer_totals(report)
        expect(totals == {0: expected, 1: expected}, f"expert load {totals}, expected {expected}")
        done = subprocess.run([context.moescope, "report", *context.traces()], capture_output=True,
                              text=True, timeout=300)
        expect("Time per step by phase" in done.stdout and "recompute" in done.stdout,
               f"no phase table in the text report:\n{done.stdout}")
    case.__doc__ = checkpoint_case.__doc__
    return case


def inference_generate(context):
    """torch.no_grad() + model.generate: an inference run (forward passes and tokens as the
    program counted them), no steps, and no expert_imbalance or dead_experts from a handful
    of tokens."""
    need("torch", "transformers")
    recorded = context.record([PYTHON, context.program("hf_generate.py"), "1", "4", "12"],
                              pattern="generate.moetrace")
    seen = json.loads(recorded.stdout.strip().splitlines()[-1])
    report = context.report()
    summary = report["summary"]
    expect(summary["run"] == "inference" and summary["steps"] == 0, summary)
    expect(summary["forward_passes"] == seen["forwards"],
           f"{summary['forward_passes']} forward passes reported, {seen['forwards']} run")
    expect(summary["tokens"] == seen["tokens"],
           f"{summary['tokens']} tokens reported, {seen['tokens']} run")
    chance = [f for f in report["findings"] if f["kind"] in ("expert_imbalance", "dead_experts")]
    expect(not chance, f"findings from {seen['tokens']} tokens: {chance}")
    done = subprocess.run([context.moescope, "report", *context.traces()], capture_output=True,
                          text=True, timeout=300)
    expect(f"inference: {seen['forwards']} forward passes" in done.stdout, done.stdout)


def profiler_iterations(context):
    """torch.profiler with prof.step() per iteration: as many steps as iterations (no empty
    trailing one); the program's own Kineto trace has the same operators as without moescope;
    that trace given with the .moetrace of the same process is refused as one process."""
    need("torch", "transformers")
    iterations = 8
    plain_json = os.path.join(context.work, "plain_kineto.json")
    recorded_json = os.path.join(context.work, "recorded_kineto.json")
    run_command([PYTHON, context.program("profiler_iterations.py"), str(iterations), plain_json],
                context.env, 600)
    recorded = run_command([context.moescope, "record", "-o",
                            os.path.join(context.work, "prof.moetrace"), "--", PYTHON,
                            context.program("profiler_iterations.py"), str(iterations),
                            recorded_json], context.env, 600)
    expect(recorded.returncode == 0, recorded.stderr)
    report = context.report()
    expect(report["summary"]["steps"] == iterations,
           f"{report['summary']['steps']} steps for {iterations} iterations")

    def operators(path):
        with open(path) as handle:
            events = json.load(handle)["traceEvents"]
        return collections.Counter(event["name"] for event in events
                                   if event.get("cat") == "cpu_op")
    plain_ops, recorded_ops = operators(plain_json), operators(recorded_json)
    extra = recorded_ops - plain_ops
    expect(not extra, f"operators only in the recorded run's profiler trace: {dict(extra)}")
    mixed = subprocess.run([context.moescope, "report", recorded_json, *context.traces()],
                           capture_output=True, text=True, timeout=300)
    expect(mixed.returncode == 1 and "one process" in mixed.stderr,
           f"mixing the program's Kineto trace with its .moetrace: rc {mixed.returncode}\n"
           f"{mixed.stdout}{mixed.stderr}")
    other = subprocess.run([context.moescope, "report", plain_json, *context.traces()],
                           capture_output=True, text=True, timeout=300)
    expect(other.returncode == 1 and "clock" in other.stderr,
           f"another process's Kineto trace with a .moetrace: rc {other.returncode}\n"
           f"{other.stdout}{other.stderr}")


def fsdp_exposed_text(context):
    """FSDP2 on 2 Gloo ranks: the communication the report names is all_gather and
    reduce_scatter, and no finding speaks of an all-to-all the run does not have."""
    need("torch")
    context.record([PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    "2", context.program("fsdp_gloo_train.py"), "4"],
                   normalize=lambda text: "")
    report = context.report()
    kinds = {op["kind"] for op in report["communication"]["ops"]}
    expect({"all_gather", "reduce_scatter"} <= kinds and "all_to_all" not in kinds,
           f"communication kinds {kinds}")
    exposed = [f for f in report["findings"] if f["kind"] == "exposed_communication"]
    expect(exposed, f"no exposed_communication finding: {report['findings']}")
    for finding in report["findings"]:
        text = finding["evidence"] + " " + finding["suggestion"]
        expect("all-to-all" not in text and "all_to_all" not in text,
               f"{finding['kind']} speaks of an all-to-all: {text}")
    expect("all_gather" in exposed[0]["evidence"] and "reduce_scatter" in exposed[0]["evidence"],
           exposed[0]["evidence"])


def cli_honesty(context):
    """record -o into a missing folder creates it; -o naming a directory or /proc/version
    fails before the program starts; report on JSON that is not a trace fails naming why;
    info shows a Kineto file and a one-process trace with the rank report uses."""
    need("torch")
    program = [PYTHON, "-c", "open(__import__('sys').argv[1], 'w').write('ran')",
               os.path.join(context.work, "ran.txt")]
    marker = program[-1]
    nested = os.path.join(context.work, "new", "folder", "run.moetrace")
    shutil.rmtree(os.path.join(context.work, "new"), ignore_errors=True)
    done = run_command([context.moescope, "record", "-o", nested, "--", PYTHON, "-c",
                        "import torch; torch.ones(2).sum()"], context.env, 300)
    expect(done.returncode == 0 and os.path.isfile(nested),
           f"-o into a missing folder: rc {done.returncode}, {done.stderr}")
    for bad in (context.work, "/proc/version"):
        if os.path.exists(marker):
            os.remove(marker)
        done = run_command([context.moescope, "record", "-o", bad, "--", *program],
                           context.env, 300)
        expect(done.returncode != 0 and not os.path.exists(marker)
               and "written" not in done.stderr,
               f"-o {bad}: rc {done.returncode}, program ran: {os.path.exists(marker)}\n"
               f"{done.stderr}")
    not_traces = {"array.json": "[1, 2, 3]"}
    report_json = os.path.join(context.work, "report_of_run.json")
    with open(report_json, "w") as handle:
        json.dump(context.report([nested]), handle)
    for name, text in not_traces.items():
        with open(os.path.join(context.work, name), "w") as handle:
            handle.write(text)
    for path in [os.path.join(context.work, name) for name in not_traces] + [report_json]:
        done = subprocess.run([context.moescope, "report", path], capture_output=True, text=True,
                              timeout=120)
        expect(done.returncode == 1 and "not a trace" in done.stderr,
               f"report {path}: rc {done.returncode}\n{done.stdout}{done.stderr}")
    kineto = os.path.join(context.work, "kineto.json")
    subprocess.run([PYTHON, context.program("profiler_optimizer_steps.py"), kineto], check=True,
                   env=context.env, timeout=600, capture_output=True)
    info = subprocess.run([context.moescope, "info", kineto, nested], capture_output=True,
                          text=True, timeout=120)
    expect(info.returncode == 0, info.stderr)
    expect("pid ?" not in info.stdout and "rank -1" not in info.stdout
           and "torch.profiler (Kineto) trace" in info.stdout, info.stdout)
    one = subprocess.run([context.moescope, "info", nested], capture_output=True, text=True,
                         timeout=120)
    expect("report calls it rank 0" in one.stdout, one.stdout)
    expect(context.report([nested])["breakdown"][0]["rank"] == 0, "report's rank")


NODE_B_CLOCK_AHEAD_S = 1000


def free_port():
    import socket
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def clocks_of_two_hosts(context):
    """Two torchrun nodes (one Gloo rank each), each in its own UTS namespace (host node-a,
    node-b) and node-b in a time namespace whose CLOCK_MONOTONIC runs 1000 s ahead: the report
    aligns node-b by collective ends, states an error bound, and the true offset (-1000 s) lies
    within it, from the traces and from their summaries alike."""
    need("torch")
    probe = subprocess.run(["unshare", "--uts", "--time", "--monotonic", "1", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        raise Skip(f"no UTS and time namespaces here (unshare: {probe.stderr.strip()})")
    port = free_port()
    pattern = os.path.join(context.work, "run.%r.moetrace")

    def node(rank, host, clock):
        command = (f"hostname {host} && exec {context.moescope} record -o {pattern} -- "
                   f"{PYTHON} -m torch.distributed.run --nnodes 2 --node_rank {rank} "
                   f"--nproc_per_node 1 --master_addr 127.0.0.1 --master_port {port} "
                   f"{context.program('gloo_sgd_steps.py')}")
        return subprocess.Popen(["unshare", "--uts", *clock, "sh", "-c", command],
                                env=context.env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    nodes = [node(0, "node-a", []),
             node(1, "node-b", ["--time", "--monotonic", str(NODE_B_CLOCK_AHEAD_S)])]
    outputs = [process.communicate(timeout=300) for process in nodes]
    for process, (out, err) in zip(nodes, outputs):
        if process.returncode != 0:
            raise Failure(f"a node failed (exit {process.returncode}):\n{out}{err}")
    traces = context.traces()
    expect(len(traces) == 2, f"expected one trace per node, got {traces}")
    done = subprocess.run([context.moescope, "summarize", *traces], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0:
        raise Failure(f"moescope summarize failed: {done.stderr}")
    summaries = sorted(os.path.join(context.work, name) for name in os.listdir(context.work)
                       if name.endswith(".moesummary"))
    true_offset_ns = -NODE_B_CLOCK_AHEAD_S * 1_000_000_000
    expect(len(summaries) == 2, f"expected one summary per trace, got {summaries}")
    # report reads the summaries beside the traces; --detail reads the traces themselves.
    for source, options in (("traces", ["--detail"]), ("summaries", [])):
        summary = context.report(traces, options)["summary"]
        expect(summary["clock_alignment"] == "collective ends",
               f"{source}: clocks aligned by {summary['clock_alignment']!r}")
        hosts = summary.get("clock_hosts", [])
        expect(len(hosts) == 1 and hosts[0]["host"] == "node-b",
               f"{source}: clock hosts {hosts}")
        bound = hosts[0]["error_bound_ns"]
        error = abs(hosts[0]["offset_ns"] - true_offset_ns)
        expect(bound is not None and error <= bound,
               f"{source}: offset {hosts[0]['offset_ns']} ns is {error} ns from the true "
               f"{true_offset_ns} ns, outside the stated bound {bound}")
        # A bound is only useful well below the skew it corrects: collectives here take
        # microseconds to milliseconds, however loaded the machine.
        expect(bound < 1_000_000_000, f"{source}: error bound {bound} ns is no bound")
    print(f"node-b offset {hosts[0]['offset_ns'] / 1e9:.6f} s, error {error / 1e3:.1f} us "
          f"<= bound {bound / 1e3:.1f} us")


CASES = {
    "hf_mixtral": hf_model_case("mixtral"),
    "hf_qwen2_moe": hf_model_case("qwen2_moe"),
    "hf_qwen3_moe": hf_model_case("qwen3_moe"),
    "hf_deepseek_v3": hf_model_case("deepseek_v3"),
    "torchrun_gloo_training": torchrun_gloo_training,
    "gloo_collectives": gloo_collectives,
    "gloo_late_rank_wait": gloo_late_rank_wait,
    "annotation_without_step": annotation_without_step,
    "kineto_optimizer_steps": kineto_optimizer_steps,
    "chained_sitecustomize": chained_sitecustomize,
    "viewer_screenshots": viewer_screenshots,
    "viewer_wait_shading": viewer_wait_shading,
    "torch_compile_aot_eager": torch_compile_case("aot_eager"),
    "torch_compile_inductor": torch_compile_case("inductor"),
    "checkpoint_reentrant": checkpoint_case("reentrant"),
    "checkpoint_non_reentrant": checkpoint_case("non_reentrant"),
    "inference_generate": inference_generate,
    "profiler_iterations": profiler_iterations,
    "fsdp_exposed_text": fsdp_exposed_text,
    "cli_honesty": cli_honesty,
    "clocks_of_two_hosts": clocks_of_two_hosts,
}


def main(cases=None, description=__doc__):
    """Runs the case named by --case; the exit status says pass (0), fail (1) or skip (77).
    Other drivers (dashboards_test.py) pass their own cases."""
    cases = CASES if cases is None else cases
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--case", required=True, choices=sorted(cases))
    parser.add_argument("--moescope", required=True)
    parser.add_argument("--programs", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    try:
        once_more_on_teardown_abort(args.case, lambda: cases[args.case](Context(args)))
    except Skip as reason:
        print(f"SKIP {args.case}: {reason}")
        return SKIP
    except Failure as failure:
        print(f"FAIL {args.case}: {failure}")
        return 1
    print(f"PASS {args.case}: {cases[args.case].__doc__.strip().splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
