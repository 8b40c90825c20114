"""One mutation per safety rule (design.md section 5, the README's promises, and the rules
the trust and hostile-API issues added), each with the tests that must kill it.

Every mutation is the smallest change that switches its rule off while the rest of the
product keeps working, written against a function and a piece of its source (mutate.py),
so it keeps applying as the code moves and says "stale" when it no longer does. Where a
rule has a pure decision function, a unit test is named first: `unit=True` marks the
mutations tests/unit alone must kill (the quick set, run in CI). The lab tests named after
it stay the end-to-end proof.
"""

from __future__ import annotations

from .mutate import Mutation

U = "tests/unit/"
R = "tests/reliability/"
E = "tests/e2e/"

MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        "digest: an edited plan file is refused", "planner/plan/codec.py", "loads",
        'if data["digest"] != expected:', "if False:",
        (U + "test_plan_codec.py", E + "test_apply.py::test_refusals_before_any_change"),
        "a plan edited after review would be applied", unit=True),
    Mutation(
        "drift: a host key that changed since the plan is refused", "executor/drift.py",
        "differences", "if old.host_key != new.host_key:", "if False:",
        (U + "test_drift.py", U + "test_apply_checks.py"),
        "another machine at a host's address would be written to", unit=True),
    Mutation(
        "host keys: a key known_hosts marks @revoked is never accepted",
        "planner/hosts/host_keys.py", "KnownHostsFiles.revoked",
        "return key.asbytes() in self._index(path).revoked", "return False",
        (U + "test_known_hosts.py",
         E + "test_plan_preflight.py::"
         "test_a_revoked_host_key_is_refused_even_where_known_or_with_opt_in"),
        "a stolen host key the user revoked would still be trusted", unit=True),
    Mutation(
        "drift: a read that changed since the plan is refused", "executor/drift.py",
        "differences", "elif old.reads.get(target) != new.reads.get(target):",
        "elif False:", (U + "test_drift.py", U + "test_apply_checks.py"),
        "a file edited after review would be overwritten unseen", unit=True),
    Mutation(
        "drift: apply refuses when the hosts changed", "executor/apply.py", "_held_to_the_plan",
        "if drift:", "if False:",
        (E + "test_apply.py::test_refusals_before_any_change",),
        "the drift check would be computed and ignored"),
    Mutation(
        "signers: only signatures that verified count, each principal once",
        "planner/plan/signers.py", "count_signers",
        "{c.principal for c in checks if c.valid and c.principal}",
        "{c.principal for c in checks if c.principal}",
        (U + "test_signers.py", E + "test_signing.py::test_signatures_gate_apply"),
        "a signature over another plan, or by a revoked key, would approve this one",
        unit=True),
    Mutation(
        "replay: a plan already applied is never applied again", "executor/replay.py",
        "judge", 'if not all(r.get("interrupted") is True for r in found.values()):',
        "if False:", (U + "test_replay.py",
                      E + "test_apply.py::test_apply_changes_on_one_controller_and_three_workers"),
        "an old approved plan could be replayed over the changes made since", unit=True),
    Mutation(
        "unknown actions are refused before anything changes",
        "executor/actions/registry.py", "check_handled",
        "if change.action not in HANDLERS:", "if False:",
        (U + "test_action_registry.py",),
        "a plan naming an action this version lacks would half-apply", unit=True),
    Mutation(
        "default-deny phases: an undeclared phase is never run by a dry run",
        "planner/phases/base.py", "Phase",
        "dry_run: ClassVar[DryRun] = DryRun.REPORTED",
        "dry_run: ClassVar[DryRun] = DryRun.RUNS_READ_ONLY",
        (U + "test_dryrun.py",), "a new phase would change hosts during a plan", unit=True),
    Mutation(
        "secrets masked in every diff", "planner/desired/compare.py", "_masked",
        "return MASK if before or theirs is None or mine == theirs else MASK_CHANGED",
        "return mine", (U + "test_desired.py", U + "test_kube_masking.py",
                        R + "test_secrets.py"),
        "a registry password would be printed in the plan and the PR", unit=True),
    Mutation(
        "secrets salted: a plan carries HMAC digests keyed by its own salt",
        "planner/config/secrets.py", "Secret.salted_digest",
        "hmac.new(salt,", "hmac.new(b'',", (U + "test_secrets_salted.py",),
        "a short password could be guessed offline from a posted plan", unit=True),
    Mutation(
        "fresh readiness: Ready counts only with a heartbeat after the restart",
        "executor/readiness.py", "Waiter.waiting_for",
        "beat <= datetime.datetime.fromtimestamp(self.stopped_at, datetime.UTC)", "False",
        (U + "test_readiness.py",),
        "a node's stale Ready from before the stop would end the wait at once", unit=True),
    Mutation(
        "controllers one at a time, whatever the worker concurrency", "executor/rollout.py",
        "Rollout._run",
        "controllers = self._leader_last(controllers)\n"
        "        for i, job in enumerate(controllers):",
        "controllers = self._leader_last(controllers)\n"
        "        outcomes = self._window(controllers, len(controllers), [])\n"
        "        for i, job in enumerate(controllers[:0]):",
        (U + "test_rollout_order.py",
         E + "test_apply.py::test_controllers_restart_one_at_a_time_at_the_default_concurrency"),
        "two controllers down at once: the API and etcd quorum gone", unit=True),
    Mutation(
        "quorum gate: the etcd leader's controller restarts last",
        "executor/rollout.py", "Rollout._leader_last",
        "return [j for j in controllers if j is not last[0]] + last",
        "return controllers",
        (U + "test_rollout_order.py",
         E + "test_quorum_gate.py::test_a_healthy_rollout_is_never_leaderless_and_fails_no_"
             "other_controller"),
        "etcd changes leader up to once per controller, each hand-over failing writes",
        unit=True),
    Mutation(
        "quorum gate: no controller is stopped unless etcd keeps a quorum without it",
        "planner/facts/etcd_gate.py", "judge",
        "    if problems:\n        return Verdict(True,",
        "    if False:\n        return Verdict(True,",
        (U + "test_etcd_gate.py",
         E + "test_quorum_gate.py::test_a_member_down_before_the_plan_is_a_problem_and_apply_"
             "refuses"),
        "a restart with a member already down or behind would take etcd's quorum, and the "
        "whole API, with it", unit=True),
    Mutation(
        "quorum gate before each controller's cordon: a refusal stops the rollout there",
        "executor/rollout.py", "Rollout._run",
        "                if self._refused:", "                if False:",
        (E + "test_quorum_gate.py::test_a_member_paused_during_the_rollout_stops_it_before_"
             "the_next_controller",),
        "a member lost mid-rollout would go unseen: the next controller's stop loses quorum"),
    Mutation(
        "quorum gate right before each stop: a member lost during the drain stops the rollout",
        "executor/host_flow.py", "HostFlow._gate_before_stop",
        "        if why:", "        if False:",
        (E + "test_quorum_gate.py::test_a_member_paused_during_the_drain_stops_the_rollout_"
             "before_the_engine_stops",),
        "a member lost while a controller drains would go unseen: its stop loses quorum"),
    Mutation(
        "rke2: the API server that answers after a restart is the pod of the new manifest",
        "executor/readiness.py", "Waiter.waiting_for",
        "        if manifest:  # rke2: the API server that answered must be the new one",
        "        if False:",
        (U + "test_mirror_pod.py",
         E + "test_rke2_apiserver_pod.py::test_the_old_api_server_pod_still_serving_is_not_"
             "back"),
        "the old static pod still serving would pass for the new API server: the next "
        "controller stops before this one's new API server ever ran"),
    Mutation(
        "rke2: a crash loop is seen in the API server's mirror pod restart count",
        "executor/readiness.py", "Waiter._read_mirror",
        "        if restarts is not None and restarts >= CRASH_RESTARTS:",
        "        if False:",
        (U + "test_mirror_pod.py",
         E + "test_rollout_fidelity.py::test_crash_looping_api_server_is_rolled_back_with_"
             "its_log"),
        "a crash-looping API server whose old logs the kubelet removed would go unseen "
        "until the readiness timeout, its logs gone from the error"),
    Mutation(
        "rke2: an older manifest's crash-looping pod is not the new start's crash loop",
        "executor/mirror_pod.py", "crash_restarts",
        "if (manifest and view.config_hash != manifest) or",
        "if False or",
        (U + "test_mirror_pod.py::test_a_crash_looping_pod_of_an_older_manifest_is_not_this_"
             "starts_crash_loop",),
        "a rollback that restored a good config would fail as crash-looping on the pod of "
        "the config it undoes, while the kubelet had not replaced it yet", unit=True),
    Mutation(
        "rke2: a rollback counts no restart of the pod of the config it undoes",
        "executor/mirror_pod.py", "crash_restarts",
        "or (undone and view.config_hash == undone):", "or False:",
        (U + "test_mirror_pod.py", E + "test_rollout_fidelity.py::test_a_rollback_waits_out_"
         "the_undone_pods_restarts_until_its_manifest_is_written"),
        "a rollback whose start had not rewritten the manifest yet would fail as "
        "crash-looping on the undone config's pod (ROLLBACK FAILED, node left cordoned)",
        unit=True),
    Mutation(
        "rollback restores and restarts: the engine reads the old files again",
        "executor/host_flow.py", "HostFlow._roll_back",
        "            if job.restart:\n                # The engine may be up",
        "            if job.restart and False:\n                # The engine may be up",
        (E + "test_rollout_fidelity.py::test_crash_looping_api_server_is_rolled_back_with_its_log",
         R + "test_fault_engine.py::test_engine_refusing_the_new_config_is_rolled_back"),
        "a rollback would put the old files back under an engine still running the new ones"),
    Mutation(
        "uncordon only nodes cargoship cordoned (after success)", "executor/host_flow.py",
        "HostFlow._given_back", "if reached.cordoned and not self._uncordon_back(job):",
        "if not self._uncordon_back(job):",
        (R + "test_uncordon_only_ours.py",),
        "a node an operator cordoned for maintenance would be put back into service"),
    Mutation(
        "uncordon only nodes cargoship cordoned (after a rollback)", "executor/host_flow.py",
        "HostFlow._uncordon", "if cordoned and self.ops is not None:",
        "if self.ops is not None:", (R + "test_uncordon_only_ours.py",),
        "a rollback would put an operator's cordoned node back into service"),
    Mutation(
        "lock: a fresh lock of another run is never taken over",
        "executor/sh/lock_acquire.sh", "", '-le "$STALE_AFTER"', '-ge "$STALE_AFTER"',
        (U + "test_lock_script.py", E + "test_lock.py"),
        "two applies would change one host at once", unit=True),
    Mutation(
        "host content is data: a kubeconfig's exec/auth-provider never reaches the client",
        "planner/kube.py", "parse_admin", '"user": kept_user}]', '"user": user}]',
        (U + "test_kube_admin.py", R + "test_trust_kubeconfig.py"),
        "a hostile controller could run a command on the operator's machine", unit=True),
    Mutation(
        "node identity: a host speaks only for its own node", "executor/node_identity.py",
        "check", "if not set(ips) & addresses:", "if False:",
        (U + "test_node_identity.py", R + "test_trust_node_identity.py"),
        "root on one host could have another host's node cordoned and drained", unit=True),
    Mutation(
        "bounded reads: a fact's output over its limit is refused unread",
        "planner/facts/bounds.py", "check_size",
        "if len(text) > limit or size_of(text) > limit:", "if False:",
        (U + "test_fact_parsers_bounded.py",),
        "a host printing forever would exhaust the operator's memory", unit=True),
    Mutation(
        "bounded reads: a fact's output is cut at its limit as it arrives",
        "planner/hosts/batch.py", "Sections._keep",
        "part = data[:self._room]", "part = data",
        (U + "test_sections.py",),
        "a host's listing would be held whole, however large, before its parser refused it",
        unit=True),
    Mutation(
        "bounded YAML: a document aliases would blow up is refused before it is built",
        "planner/safeyaml.py", "compose",
        'if node is not None and ("*" in text if isinstance(text, str) else b"*" in text):',
        "if False:",
        (U + "test_safeyaml.py", U + "test_desired.py"),
        "a few hundred bytes of YAML from a host could cost minutes of CPU and gigabytes",
        unit=True),
    Mutation(
        "bounded reads: an API answer over its cap is refused before it is held",
        "planner/kube_bounds.py", "BoundedPoolManager._read_whole",
        "if len(body) > self.max_bytes:", "if False:",
        (U + "test_kube_bounds.py",),
        "a hostile API server could send 400 MB into the operator's memory", unit=True),
    Mutation(
        "signals: SIGTERM/SIGHUP during a rollout finish the host in progress and record",
        "executor/signals.py", "Interrupts._handle",
        "if not self.changing.is_set():", "if True:",
        (U + "test_signals.py", R + "test_fault_term_hup.py"),
        "a CI runner's SIGTERM would end apply mid-restart with nothing recorded", unit=True),
    Mutation(
        "signals: the handler takes no lock (it only writes to a pipe)",
        "executor/signals.py", "Interrupts._handle",
        "os.write(self._pipe[1], bytes([signum]))", "self._react(signum)",
        (U + "test_signals.py",),
        "a second SIGTERM landing while apply joined a thread hung it for ever", unit=True),
    Mutation(
        "no shell injection: every value reaching a remote command is quoted",
        "planner/hosts/batch.py", "quote", "return shlex.quote(value)", "return value",
        (U + "test_quoting.py", R + "test_hostile_values.py"),
        "a value in cluster.yaml could run commands as root on every host", unit=True),
    Mutation(
        "file writes never follow a link", "executor/sh/files.sh", "",
        'if [ -L "$cs_p" ] ||', "if false ||",
        (U + "test_write_refuses_links.py", R + "test_trust_files.py"),
        "a link planted between the drift check and the write would be written over",
        unit=True),
    Mutation(
        "file writes end with the file's own mode (credentials 0600)", "executor/sh/files.sh",
        "", 'chmod "$2" "$tmp"', 'chmod 0644 "$tmp"',
        (U + "test_swap_script_sh.py", R + "test_trust_files.py"),
        "registry credentials would be readable by every user of the host", unit=True),
    Mutation(
        "the controllers' signature policy is enforced whatever the flags",
        "executor/apply.py", "_policy", "rules = policy.agreed(found)", "rules = None",
        (R + "test_trust_policy.py",),
        "an unsigned plan would be applied by anyone who can reach the hosts"),
    Mutation(
        "history: a record held by a host the plan does not name is unverified",
        "planner/history_verify.py", "verify", "if outsiders:", "if False:",
        (U + "test_history_verify.py", R + "test_trust_history.py"),
        "root on one host could write history for the whole cluster", unit=True),
    Mutation(
        "every choice apply obeys is shown, non-defaults flagged",
        "planner/render/apply_block.py", "text_block",
        "for c in found if c.flagged]", "for c in found if False]",
        (U + "test_render_apply_choices.py",),
        "a reviewer would not see a drain with --force or a concurrency of 50", unit=True),
    Mutation(
        "drain choice: a restart the plan says to drain is drained, only that one in place",
        "executor/host_flow.py", "HostFlow._restart_host", "if job.drain:", "if False:",
        (U + "test_rollback.py", U + "test_rollout_order.py",
         E + "test_drain_forecast.py::test_a_restart_in_place_by_choice_neither_cordons_nor_"
             "drains"),
        "a node the plan promised to drain would restart with its pods on it", unit=True),
    Mutation(
        "drain choice: options.drain.when decides per kind, always by default",
        "planner/desired/drain_policy.py", "drains",
        'return key is None or setting(options, key) == "always"', "return False",
        (U + "test_drain_policy.py",),
        "every restart would skip its drain, whatever the config says", unit=True),
    Mutation(
        "test waits: only under a test, and only shorter", "executor/waits.py",
        "from_environment", "if not env.get(UNDER_TEST):", "if False:",
        (U + "test_waits.py", E + "test_waits_channel.py"),
        "anyone could make apply give up on hosts sooner than it should", unit=True),
    Mutation(
        "engine config: another audit policy or admission config for the API server is a "
        "problem", "planner/desired/engine_merge.py", "apiserver_overrides",
        "if flag in ours and value != ours[flag]:", "if False:",
        (U + "test_engine_semantics.py",
         E + "test_engine_sources.py::test_a_yml_dropin_setting_another_audit_policy_is_a_"
             "problem_with_its_line"),
        "the plan would promise cargoship's audit policy while the API server ran another",
        unit=True),
    Mutation(
        "labels: only a label cargoship set is ever removed from a node",
        "planner/phases/label_nodes.py", "LabelNodes.assess",
        "(ours | owned_by[name]) & {k for k in nodes[name]",
        "{k for k in nodes[name]",
        (E + "test_labels_removed.py",),
        "a node-role label the user or the engine set would be planned away"),
    Mutation(
        "drain forecast: a pod the drain would refuse is a plan problem",
        "planner/phases/drain_forecast.py", "forecast",
        'if action == "refuse":', "if False:",
        (E + "test_drain_forecast.py",),
        "a plan would be approved that apply can only fail at its first drain"),
    Mutation(
        "chart removal: a removed chart's manifest is emptied, never deleted while applied",
        "planner/phases/sync_common.py", "_file_changes",
        "if chart_name(path, where) is not None:", "if False:",
        (E + "test_chart_removal.py",),
        "a chart taken out of cluster.yaml would keep its values in force under No changes"),
)
