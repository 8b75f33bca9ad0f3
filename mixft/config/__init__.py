"""Layer 5, configuration: what one run is asked to do.

    run_config   RunConfig: every option, declared once (the CLI's parser is generated from it)
    file         --config FILE (YAML/JSON) and the config.yaml every run writes

Imports the layers below (amp/ for DEVICE_CHOICES, train/ for schedules, callbacks/ for tracker names).
"""
