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
from compat_harness import Failure, Skip, chrome_events, run_command  # noqa: E402

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

    def report(self, traces=None):
        done = subprocess.run([self.moescope, "report", "--format", "json", "--quiet",
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
    with the bytes of its gradient."""
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


CASES = {
    "hf_mixtral": hf_model_case("mixtral"),
    "hf_qwen2_moe": hf_model_case("qwen2_moe"),
    "hf_qwen3_moe": hf_model_case("qwen3_moe"),
    "hf_deepseek_v3": hf_model_case("deepseek_v3"),
    "torchrun_gloo_training": torchrun_gloo_training,
    "gloo_collectives": gloo_collectives,
    "annotation_without_step": annotation_without_step,
    "kineto_optimizer_steps": kineto_optimizer_steps,
    "chained_sitecustomize": chained_sitecustomize,
    "viewer_screenshots": viewer_screenshots,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--case", required=True, choices=sorted(CASES))
    parser.add_argument("--moescope", required=True)
    parser.add_argument("--programs", required=True)
    parser.add_argument("--work", required=True)
    args = parser.parse_args()
    try:
        CASES[args.case](Context(args))
    except Skip as reason:
        print(f"SKIP {args.case}: {reason}")
        return SKIP
    except Failure as failure:
        print(f"FAIL {args.case}: {failure}")
        return 1
    print(f"PASS {args.case}: {CASES[args.case].__doc__.strip().splitlines()[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
