pytest_plugins = ["cases.plugin"]
