complete --keep-order --exclusive --command kubectl-skyhook --arguments "(COMPLETE=fish kubectl-skyhook -- (commandline --current-process --tokenize --cut-at-cursor) (commandline --current-token))"
