"""IAM of following runs with teams (config/examples/teams.yaml, queue mode; docs/teams.md, "How members
follow their runs"), simulated offline against the synthesized policies: a member holding only the team's
start policy may start the team's run reader and nothing else that reads jobs, logs or service jobs, the
other team's reader included; the reader's role reads what it answers from. On the writing side, what IAM
can separate (direct-mode log streams) is separated, and where it cannot the Service Authorization
Reference says why: SageMaker writes every team's logs to one group, streams take no condition key, and
PutMetricData's only key is the namespace."""

from __future__ import annotations

from tests.iam.calls import Call
from tests.iam.sar import DATA
from tests.iam.test_team_isolation import decisions, teams
from trainstack.queue_settings import BATCH_TRAINING_JOB_PREFIX, queue_job_prefix, training_queue_name
from trainstack.run_reader import run_reader_name
from trainstack.runs import TRAINING_LOG_GROUP

__all__ = ["teams"]  # the module fixture, shared with test_team_isolation.py

# A training job Batch started for each team's run: one name scheme for every team.
BATCH_JOB = {
    team: f"{BATCH_TRAINING_JOB_PREFIX}{queue_job_prefix(training_queue_name('trainstack'))}{key}-1"
    + "0123456789abcdef0123456789abcdef"
    for team, key in (("research", "1a2b3c4d5e6f70"), ("search", "0f1e2d3c4b5a69"))
}


def log_group(teams) -> str:
    return f"arn:aws:logs:{teams.region}:{teams.account}:log-group:{TRAINING_LOG_GROUP}"


def test_a_member_with_the_start_policy_alone_follows_only_through_the_teams_reader(teams):
    """Before the run reader, research's start policy allowed none of these: `trainstack status` and `logs`
    failed on research's own queued runs, and the only grants that made them work showed search's too."""
    member = teams.principal("research", f"arn:aws:iam::{teams.account}:role/ml-research")
    group = log_group(teams)
    calls = [
        Call(f"start {team}'s reader", member, "states:StartSyncExecution", teams.machine_arn(name))
        for team in ("research", "search")
        for name in [run_reader_name(f"trainstack-{team}")]
    ]
    for team in ("research", "search"):
        job = BATCH_JOB[team]
        calls += [
            Call(
                f"describe {team}'s batch job",
                member,
                "sagemaker:DescribeTrainingJob",
                f"arn:aws:sagemaker:{teams.region}:{teams.account}:training-job/{job}",
            ),
            Call(
                f"get {team}'s log stream", member, "logs:GetLogEvents", f"{group}:log-stream:{job}/algo-1-1"
            ),
        ]
    calls += [
        Call("filter the shared log group", member, "logs:FilterLogEvents", group),
        Call("describe any service job", member, "batch:DescribeServiceJob", "*"),
        Call("list any service jobs", member, "batch:ListServiceJobs", "*"),
    ]
    allowed = decisions(calls)
    assert [caller for caller, ok in allowed.items() if ok] == ["start research's reader"]


def test_the_teams_reader_reads_what_it_answers_from(teams):
    """The reader's own role: the team's jobs by name (Batch's too), the shared log group, the queue's
    service jobs (no resource types); its machine keeps the answers to the team's runs."""
    reader = teams.role("research", "RunReaderMachineRole")
    sagemaker = f"arn:aws:sagemaker:{teams.region}:{teams.account}:training-job"
    calls = [
        Call("own job", reader, "sagemaker:DescribeTrainingJob", f"{sagemaker}/trainstack-research-r1-1"),
        Call("batch job", reader, "sagemaker:DescribeTrainingJob", f"{sagemaker}/{BATCH_JOB['research']}"),
        Call(
            "other team's direct job",
            reader,
            "sagemaker:DescribeTrainingJob",
            f"{sagemaker}/trainstack-search-r1-1",
        ),
        Call("logs", reader, "logs:FilterLogEvents", log_group(teams)),
        Call("list jobs", reader, "sagemaker:ListTrainingJobs", "*"),
        Call("service jobs", reader, "batch:ListServiceJobs", "*"),
        Call("service job", reader, "batch:DescribeServiceJob", "*"),
        Call("write logs", reader, "logs:PutLogEvents", f"{log_group(teams)}:log-stream:x/algo-1"),
    ]
    allowed = decisions(calls)
    assert sorted(caller for caller, ok in allowed.items() if not ok) == [
        "other team's direct job",
        "write logs",
    ]


def test_a_teams_job_role_writes_no_other_teams_direct_mode_log_streams(teams):
    role = teams.role("research", "SageMakerExecutionRole")
    group = log_group(teams)
    calls = [
        Call(f"{action} {team}", role, action, f"{group}:log-stream:trainstack-{team}-r1-1/algo-1-1")
        for team in ("research", "search")
        for action in ("logs:CreateLogStream", "logs:PutLogEvents")
    ]
    allowed = decisions(calls)
    assert sorted(caller for caller, ok in allowed.items() if ok) == [
        "logs:CreateLogStream research",
        "logs:PutLogEvents research",
    ]


def test_where_iam_cannot_keep_a_teams_job_role_out_of_another_teams_logs_and_metrics():
    """docs/teams.md's words, against the Service Authorization Reference: a log stream is authorized by its
    name alone (no condition key), and in queue mode Batch names every team's jobs `AWSBatch<queue key>...`;
    PutMetricData (which SageMaker's execution role needs) supports no resource type a training job could
    name, and its one service key is the namespace, not the TrainingJobName dimension."""
    put_logs = DATA.actions.get_action_details("logs", "PutLogEvents")
    assert [(r["name"], r["conditionKeys"]) for r in put_logs["resourceTypes"]] == [("log-stream", [])]
    assert put_logs["conditionKeys"] == []
    metrics = DATA.actions.get_action_details("cloudwatch", "PutMetricData")
    assert metrics["conditionKeys"] == ["cloudwatch:namespace"]
    assert [r["name"] for r in metrics["resourceTypes"]] == ["dataset"]  # OTLP datasets, not jobs
    filter_logs = DATA.actions.get_action_details("logs", "FilterLogEvents")
    assert [r["name"] for r in filter_logs["resourceTypes"]] == ["log-group"]  # reads a group, not a stream
