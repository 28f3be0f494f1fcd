"""Flower's simulation engine (flwr 1.42, `flwr.simulation.run_simulation` with the Ray backend), as
its documentation runs a simulation: a ServerApp whose `FedAvg` strategy sends the global arrays to
the round's nodes and a ClientApp that trains on them. Run inside Flower's environment:

    python flower_driver.py SPEC_FOLDER OUT.json

fedlight's draws are handed over: node i trains client i's index set, and the strategy sends the
round's messages to the nodes of fedlight's selection (not Flower's own sampling). Every ClientApp
and the centralized evaluation (run after the last round only, as fedlight's `eval.every=rounds`)
come from peer_common, so every framework computes the same thing. With the workload on a GPU
(`device: cuda`), Ray is given the one GPU and each client all of it, so that one actor trains at
a time on it, as on the CPU; the arrays travel between the actor and the server through NumPy
(Flower's ArrayRecord), as Flower sends them.
"""

import sys
import time
from collections.abc import Iterable

import flwr
import peer_common
from flwr.app import (
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

FOLDER, OUT = sys.argv[1], sys.argv[2]
client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One client's local training from the global arrays."""
    data = peer_common.spec(FOLDER)
    net = data.net()
    net.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    config = msg.content["config"]
    client, round_index = int(config["client"]), int(config["server-round"])
    examples = peer_common.train_client(net, data, client, round_index)
    metrics = MetricRecord({"num-examples": examples})
    return Message(
        RecordDict({"arrays": ArrayRecord(net.state_dict()), "metrics": metrics}), reply_to=msg
    )


class HandedFedAvg(FedAvg):
    """FedAvg whose round r trains the clients fedlight drew for round r (node i is client i)."""

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        nodes = sorted(grid.get_node_ids())
        chosen = peer_common.spec(FOLDER)["selections"][server_round - 1]
        messages = []
        for client in chosen:
            record = RecordDict(
                {
                    "arrays": arrays,
                    "config": ConfigRecord({"server-round": server_round, "client": client}),
                }
            )
            messages.append(
                Message(record, dst_node_id=nodes[client], message_type=MessageType.TRAIN)
            )
        return messages


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    """FedAvg for the workload's rounds; a round ends when the centralized evaluation is called."""
    data = peer_common.spec(FOLDER)
    rounds = data["rounds"]
    boundaries: list[float] = []
    final = {}

    def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        boundaries.append(time.time())
        if server_round < rounds:
            return None
        net = data.net()
        net.load_state_dict(arrays.to_torch_state_dict())
        final["accuracy"] = peer_common.accuracy(net, data)
        boundaries[-1] = time.time()
        return MetricRecord({"accuracy": final["accuracy"]})

    strategy = HandedFedAvg(
        fraction_evaluate=0.0,
        min_train_nodes=1,
        min_evaluate_nodes=0,
        min_available_nodes=len(data.clients),
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(data.net().state_dict()),
        num_rounds=rounds,
        evaluate_fn=evaluate,
    )
    peer_common.report(OUT, "flower", flwr.__version__, boundaries, final["accuracy"])


if __name__ == "__main__":
    threads = peer_common.spec(FOLDER)["threads"]
    gpus = 0 if peer_common.spec(FOLDER)["device"] == "cpu" else 1  # a GPU: all of it, one actor
    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=len(peer_common.spec(FOLDER).clients),
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": float(gpus)},
            "init_args": {"num_cpus": threads, "num_gpus": gpus, "include_dashboard": False},
        },
    )
