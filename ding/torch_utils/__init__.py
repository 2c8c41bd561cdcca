from .optim import Adam, avoid_dynamo_import
