"""`srl-research`: answer a question about a strategy by proposing, validating and analysing.

Parses, calls `simrl_explore.research.agents.run_research`, writes the report and plot.
"""

from __future__ import annotations

import math
import os
import shutil

import click

from simrl.cli.app import AppCommand, abort, common_options, json_option, to_json
from simrl.cli.app import state as app_state

EXAMPLES = """\b
Examples:
  srl-research examples/research/routing.yaml -o outputs/routing
  srl-research my-question.yaml --proposals 5 --lessons lessons.jsonl -o outputs/q
  SIMRL_LLM_BASE_URL=http://127.0.0.1:8000/v1 SIMRL_LLM_MODEL=qwen3 \\
      srl-research my-question.yaml --proposer llm -o outputs/q
"""


@click.command(cls=AppCommand, epilog=EXAMPLES)
@click.argument("question_file", type=click.Path(dir_okay=False))
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False), help="Output directory.")
@click.option("--proposer", type=click.Choice(["offline", "llm"]), default="offline", show_default=True,
              help="offline: optuna TPE (or a seeded bandit without optuna); llm: an OpenAI-compatible endpoint.")
@click.option("--proposals", type=click.IntRange(0, 1000), default=None, help="Proposals beyond the stated candidate.")
@click.option("--lessons", "lessons_path", type=click.Path(dir_okay=False), default=None,
              help="Lessons file (JSONL; Markdown next to it) [default: OUTPUT/lessons.jsonl].")
@click.option("--no-optuna", is_flag=True, help="Use the seeded bandit even when optuna is installed.")
@click.option("--jobs", type=click.IntRange(1), default=None, help="SimPy worker processes [default: CPU count].")
@common_options
@json_option
def main(question_file, output, proposer, proposals, lessons_path, no_optuna, jobs, as_json):
    """Validate the question's candidate (and further proposals) against its baseline over seeds and
    workload variations; write lessons, a report with the answer, and a plot."""
    import attrs

    from simrl.config import ConfigError
    from simrl_explore.cli_sweep import Progress
    from simrl_explore.research.agents import OfflineProposer, read_lessons, run_research
    from simrl_explore.research.llm import LLMError, LLMProposer
    from simrl_explore.research.study import StudyError, check_base, load_study
    from simrl_explore.runner import default_jobs

    quiet = app_state.quiet or as_json  # no progress bar
    try:
        study = load_study(question_file)
        if proposals is not None:
            study = attrs.evolve(study, proposals=proposals)
            if study.candidate is None and proposals == 0:
                abort("the question has no candidate: give --proposals >= 1")
        from simrl.cli.app import OutputError, check_output_dir, check_output_file

        try:  # before any work: an output under a file, or a lessons path that cannot be written
            check_output_dir(output)
            if lessons_path:
                check_output_file(lessons_path, "--lessons")
        except OutputError as exc:
            abort(str(exc))
        lessons_path = lessons_path or os.path.join(output, "lessons.jsonl")
        prior = read_lessons(lessons_path)
        prop = (LLMProposer(study, prior) if proposer == "llm"
                else OfflineProposer(study, prior, use_optuna=False if no_optuna else None))
        try:
            check_base(study, question_file)  # a bad base configuration is refused before the output folder exists
        except ConfigError as exc:
            raise StudyError(f"{question_file}: base (config and set): {exc}") from None
    except (StudyError, ConfigError, LLMError, ValueError) as exc:
        abort(str(exc))
    created = not os.path.exists(output)
    try:
        os.makedirs(output, exist_ok=True)
        with Progress(quiet) as prog:
            state = run_research(study, prop, lessons_path, jobs=jobs or default_jobs(), progress=prog.task)
    except (StudyError, ConfigError, LLMError, ValueError) as exc:
        if created:  # nothing half-written: the folder this run made goes with it
            shutil.rmtree(output, ignore_errors=True)
        abort(str(exc))
    from simrl_explore.research.report import write_report

    files = write_report(state, output)
    if as_json:
        click.echo(to_json({"output": output, "files": [os.path.join(output, f) for f in files],
                            "lessons": lessons_path, "answer": answer_text(state)}))
        return
    click.echo(answer_text(state))
    click.echo(f"wrote {', '.join(os.path.join(output, f) for f in files)}; lessons: {lessons_path}")


def answer_text(state) -> str:
    lines = []
    for ls in state.lessons:
        lines.append(f"[{ls['source']}] {ls['claim']}")
    for p in state.proposals:
        if p.rejected:
            lines.append(f"[{p.source}] proposal {p.index} rejected: {p.rejected}")
    if not lines:
        lines.append("no proposal was validated")
    return "\n".join(lines)


def _finite(x) -> bool:
    return isinstance(x, int | float) and math.isfinite(x)
