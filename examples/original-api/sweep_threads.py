"""A sweep of threads per block, in the original Mneme API's style (one BaseExecutor in this process).

python sweep_threads.py --record-db DB.json --record-id ID --max-threads 1024 --results OUT
"""

import argparse
import json
import os

from mneme.mneme_types import ExperimentConfiguration, dim3
from mneme.replay_executor import BaseExecutor


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record-db", required=True)
    parser.add_argument("--record-id", required=True)
    parser.add_argument("--max-threads", type=int, default=1024)
    parser.add_argument("--results", required=True)
    args = parser.parse_args()

    results = []
    with BaseExecutor(args.record_db, args.record_id, iterations=3) as executor:
        recorded = executor.kernel_descr
        work = recorded.grid_dim.x * recorded.block_dim.x
        threads = 32
        while threads <= args.max_threads:
            config = ExperimentConfiguration(grid=dim3((work + threads - 1) // threads), block=dim3(threads))
            config.ground()
            result = executor.execute(config)
            results.append(
                {
                    "config": config.to_dict(),
                    "hash": config.hash(),
                    "result": result.to_dict(),
                    "variant": result.mneme.variant_hash,
                }
            )
            print(f"threads={threads:5d} verified={result.verified} runs(ns)={result.exec_time}")
            threads *= 2
    os.makedirs(args.results, exist_ok=True)
    with open(os.path.join(args.results, "results.json"), "w") as fd:
        json.dump(results, fd, indent=2)


if __name__ == "__main__":
    main()
