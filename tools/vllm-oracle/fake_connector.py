"""A scripted KV connector for the oracle's P/D cases, loaded by vLLM through
`kv_connector_module_path` (vllm/distributed/kv_transfer/kv_connector/factory.py).

It makes the scheduler-side decisions NixlConnector's pull scheduler makes
(vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py) for an
attention model (no prefill backoff), with no transfer behind them:

- decode side (`kv: consume`): `get_num_new_matched_tokens` reports every
  prompt token beyond the local hit as loadable asynchronously, so the
  scheduler allocates blocks for the whole prompt and parks the request in
  WAITING_FOR_REMOTE_KVS; the load "finishes" (`finished_recving`) at the
  first step >= `kv_ready_step` once it has started;
- prefill side (`kv: produce`): `request_finished` delays the free of a
  request that finished normally; the decode side "has read" the blocks
  (`finished_sending`) at the first step >= `kv_ready_step` after it
  finished.

The harness owns the script and the step count; the worker-side methods are
never called (there is no worker).
"""

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)

# request id -> ("produce" | "consume", kv_ready_step), set by the harness
# before it builds the scheduler.
SCRIPT = {}


class FakeConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        self.recv_started = set()
        # request id -> step from which its transfer may be reported done
        self.pending_recv = {}
        self.pending_send = {}

    # Scheduler side.
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        kind, _ = SCRIPT.get(request.request_id, (None, None))
        if kind == "consume" and request.request_id not in self.recv_started:
            count = len(request.prompt_token_ids or []) - num_computed_tokens
            if count > 0:
                return count, True
        return 0, False

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        kind, ready = SCRIPT.get(request.request_id, (None, None))
        if kind == "consume" and num_external_tokens > 0:
            self.recv_started.add(request.request_id)
            self.pending_recv[request.request_id] = (ready, self.current_step)

    def build_connector_meta(self, scheduler_output):
        return KVConnectorMetadata()

    def request_finished(self, request, block_ids):
        from vllm.v1.request import RequestStatus

        kind, ready = SCRIPT.get(request.request_id, (None, None))
        if kind != "produce":
            return False, None
        if request.status not in (
            RequestStatus.FINISHED_LENGTH_CAPPED,
            RequestStatus.FINISHED_STOPPED,
        ):
            return False, None
        # One list per KV-cache group, or (one group) a flat list of ids.
        if block_ids and isinstance(block_ids[0], int):
            delay = len(block_ids) > 0
        else:
            delay = any(len(group) > 0 for group in block_ids)
        if delay:
            # Reported no earlier than the next step's output.
            self.pending_send[request.request_id] = (ready, self.current_step + 1)
        return delay, None

    def take_finished(self, step):
        """The transfers the harness reports in the output of `step`, in
        ascending request id order. A real connector reports them as a set
        (`KVConnectorOutput.finished_sending`), which the scheduler iterates
        in whatever order string hashing gives; two producers released in
        one step free their blocks in that order, which decides which
        blocks are evicted first. pdsim releases in ascending id order, so
        the harness does too: an arbitrary order made canonical, not a
        decision of vLLM's."""
        recv = sorted(r for r, (ready, start) in self.pending_recv.items() if step >= max(ready, start))
        send = sorted(r for r, (ready, start) in self.pending_send.items() if step >= max(ready, start))
        for r in recv:
            del self.pending_recv[r]
        for r in send:
            del self.pending_send[r]
        return recv, send

    # The harness sets this before each schedule() and update_from_output().
    current_step = 0

    # Worker side: never called without a worker.
    def start_load_kv(self, forward_context, **kwargs):
        pass

    def wait_for_layer_load(self, layer_name):
        pass

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        pass

    def wait_for_save(self):
        pass
