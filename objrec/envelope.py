"""The operating envelope of a reference image: the views of it a camera would see that objrec recognises."""
