"""What makes a step done: checks, the model judge, failure classification."""
