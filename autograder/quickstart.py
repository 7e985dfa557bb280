"""Starting and stopping a Jupyter kernel without jupyter_client's fixed pauses.

jupyter_client is written for notebooks that live for hours, where a few hundred
milliseconds at start and stop go unnoticed. A grader starts and stops one kernel per
submission, and with a fork server a kernel is ready in about a tenth of a second, so
those pauses would be most of the cost. Nothing here changes what is said to the
kernel; only how long we wait for it.
"""

from __future__ import annotations

import asyncio
import time
from queue import Empty

import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import default


class QuickStartKernelClient(AsyncKernelClient):
    """jupyter_client's kernel client, without a fixed pause when the kernel starts.

    Its ``wait_for_ready`` ends by listening to IOPub until 0.2 s pass in silence, which
    is 0.2 s per submission for nothing: nbclient ignores messages that answer no
    request of its own. Here the same handshake (a ``kernel_info`` reply on the shell
    channel, then a first IOPub message to show that channel is connected) is followed
    by draining only what has already arrived.
    """

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        context = zmq.asyncio.Context()
        # The client connects before the kernel has bound its sockets; ZeroMQ then
        # retries every 100 ms by default. Retry sooner: a forked kernel is up fast.
        context.setsockopt(zmq.RECONNECT_IVL, 10)
        return context

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass  # IOPub not connected yet: ask again
                else:
                    self._handle_kernel_info_reply(reply)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")
        while True:
            try:
                await self.iopub_channel.get_msg(timeout=0)
            except Empty:
                break


async def kill_kernel_now(km: AsyncKernelManager) -> None:
    """``shutdown_kernel(now=True)`` without its pauses.

    That first sends an interrupt the dying kernel never reads (closing the control
    socket then lingers 100 ms for it) and checks for the process's end every 100 ms.
    A graded kernel has nothing to save: kill it and wait in 10 ms steps.
    """
    if km.has_kernel:
        await km.provisioner.kill()
        for _ in range(500):
            if await km.provisioner.poll() is not None:
                break
            await asyncio.sleep(0.01)
        await km.provisioner.wait()
    await km.cleanup_resources()
