"""What runs replays and judges them: one replay as the command line and the API run it,
the capacity search, and ``validate-model``'s arms. Above the replayer, the simulator,
the exporters and the report (which it composes), below the command line."""
