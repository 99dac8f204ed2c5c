"""A hosts file's run: its nodes reached over SSH, its attempts started by ddptui's agent."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping

from ddptui.plan.launch import DEBUG_ENV
from ddptui.remote.connection import RemoteCluster
from ddptui.run.agent.call import kept_agents
from ddptui.run.backends.base import RunBackend, StartFailed
from ddptui.run.backends.ssh import launcher, spares
from ddptui.run.backends.ssh.launcher import LaunchError
from ddptui.run.record import NodeRecord, RunRecord, RunState
from ddptui.run.stopper import FAILED_GRACE_S, StopReport, stop_nodes, terminate


class SshBackend(RunBackend):
    ends_set_aside = True

    async def start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        hosts = [self.config.host(node.host) for node in self.owner.record.nodes]
        # One agent kept per host for all the start's commands: each costs a line each way,
        # not a session and a Python start on the host (three of those were 0.45 s).
        async with kept_agents(self.remote, hosts):
            return await self._start(number, resume=resume, debug=debug)

    async def _start(self, number: int, *, resume: bool, debug: bool) -> StartFailed | None:
        owner, config = self.owner, self.config
        try:
            if resume:
                await launcher.end_leftovers(self.remote, config, owner.record, say=owner.say)
                # Copies between hosts go through this machine's SSH connections.
                assert isinstance(self.remote, RemoteCluster)
                await launcher.carry_checkpoints(self.remote, config, owner.record, say=owner.say)
            # The port before staging: a fixed one that is taken stops the launch before
            # anything reaches the hosts.
            port = await launcher.master_port(self.remote, config, owner.record)
            if not resume:
                await launcher.stage(
                    self.remote, config, owner.record, say=owner.say, reached=owner.reached
                )
        except LaunchError as error:
            if resume:
                return StartFailed(f"cannot resume: {error}", data={"exit_code": error.exit_code})
            return StartFailed(str(error), end=RunState.FAILED)
        owner.attempt_starting(
            number,
            port,
            f"starting attempt {number} on {len(owner.record.nodes)} host(s)",
        )
        try:
            await launcher.start_attempt(
                self.remote,
                config,
                owner.record,
                number,
                port,
                say=owner.say,
                extra_args=config.job.resume_args if resume else (),
                extra_env=DEBUG_ENV if resume and debug else None,
                reached=owner.reached,
            )
        except LaunchError as error:
            return StartFailed(str(error), end=RunState.FAILED)
        owner.attempt_running("every node started")
        return None

    async def replace(
        self, swaps: Mapping[str, str], without: Collection[str] = ()
    ) -> StartFailed | None:
        owner = self.owner
        old_head = owner.record.head
        try:
            nodes, master_addr = await spares.replaced_nodes(
                self.config, owner.record, swaps, without
            )
        except LaunchError as error:
            return StartFailed(f"cannot recover on a spare: {error}")

        def placed(record: RunRecord) -> None:
            record.nodes, record.master_addr = nodes, master_addr
            record.world_size = sum(node.nproc for node in nodes)

        owner.change(placed)
        # The transport reaches the nodes the record names: the spare's now, not the host's.
        await self.disconnect()
        await self.connect()
        fresh = [node for node in owner.record.nodes if node.host in swaps.values()]
        try:
            await launcher.stage(self.remote, self.config, owner.record, say=owner.say, only=fresh)
            if owner.record.head.host != old_head.host:
                await self._carry_to_new_head(old_head)
        except LaunchError as error:
            return StartFailed(f"cannot recover on a spare: {error}")
        return None

    async def _carry_to_new_head(self, old_head: NodeRecord) -> None:
        """The old node 0's checkpoints to the new, on a connection to both of their own (the
        run's reaches the record's nodes: the old node 0 is no longer one). One that does not
        answer hands on nothing: the bundled trainer's newest rescue on another node then."""
        record = self.owner.record
        hosts = [self.config.host(old_head.host), self.config.host(record.head.host)]
        remote = await self.open_transport(hosts, None)
        try:
            assert isinstance(remote, RemoteCluster)
            await launcher.carry_to_new_head(
                remote, self.config, record, old_head, record.head, say=self.owner.say
            )
        except LaunchError as error:
            if record.entry != "trainer":
                raise
            self.owner.say(f"{old_head.host} hands on no checkpoint: {error}")
            assert isinstance(self.remote, RemoteCluster)
            await launcher.carry_from_peers(
                self.remote, self.config, record.nodes[1:], record.head, say=self.owner.say
            )
        finally:
            await remote.close()

    async def stop(self, *, kill: bool, graceful: bool) -> StopReport:
        return await stop_nodes(
            self.remote,
            self.config,
            self.owner.record,
            kill=kill,
            graceful=graceful,
            say=self.owner.say,
        )

    async def end_set_aside(self, host: str, run_dir: str) -> StopReport | None:
        config = self.config
        node = NodeRecord(host, config.host(host).address, 0, 0, run_dir, [], {})
        alone = dataclasses.replace(self.owner.record, nodes=[node])
        remote = await self.open_transport([config.host(host)], None)
        try:
            return await terminate(remote, config, alone, grace=FAILED_GRACE_S)
        finally:
            await remote.close()

    async def terminate(self, skip: Collection[str] = ()) -> StopReport:
        return await self.end_attempt_processes(skip)
