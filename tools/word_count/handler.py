async def handler(args: dict, ctx) -> dict:
    return {"words": len(args["text"].split())}
