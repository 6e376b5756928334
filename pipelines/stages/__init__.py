"""The stages of a run (prepare, train, average, evaluate, export, translate, score), each usable
alone against a model dir through `modes.Stage.run(recipe, context)`; each asks the task for what
differs between tasks, none tests its kind."""
