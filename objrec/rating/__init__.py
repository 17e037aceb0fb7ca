"""Rating reference images: how well an image will be recognised, and why not."""
