"""The CPU world: procedural problem families and their splits, the tiny model, the shipped
base model's corpus and training, and the loaders of the public datasets."""
